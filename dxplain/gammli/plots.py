"""Global explanations (the paper's Fig. 3/4/6/7) as tables, and as PNGs when matplotlib is installed.

* ``shapes``: each kept main effect's h(x) over a grid of its feature (or per level), with the feature's
  distribution over the users/items (``density``);
* ``interactions``: each kept interaction's h(x, z) on a grid;
* ``groups``: the K×L group-preference matrix ŨṼᵀ (cluster means of the latent factors);
* ``ir``: term → importance ratio (eq. 5).
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa

from .model import GAMMLIModel
from .terms import N_MAIN, N_PAIR, Feature, column

GRID = 60
GRID2 = 25


def _points(f: Feature, n: int) -> tuple[list[str], np.ndarray]:
    """(labels, values) at which to draw a feature: a grid over its range, or its levels."""
    if f.kind == "spline":
        x = np.linspace(f.lo, f.hi, n)
        return [f"{v:.6g}" for v in x], x
    vals = np.array(f.levels, dtype=object if isinstance(f.levels[0], str) else float)
    return [str(v) for v in f.levels], vals


def effect_tables(model: GAMMLIModel) -> dict[str, pa.Table]:
    feats = {
        f.label: (f, model.users if f.side == "user" else model.items) for fs in model.features.values() for f in fs
    }
    shapes = {k: [] for k in ("term", "x", "x_value", "value", "density")}
    inter = {k: [] for k in ("term", "x", "z", "value")}
    for t, c in zip(model.additive.terms, model.additive.coefs):
        if t.kind in ("user", "item"):
            f, ft = feats[t.name]
            labels, x = _points(f, GRID)
            col = column(ft, f)
            if f.kind == "spline":
                h, edges = np.histogram(col, bins=GRID, range=(f.lo, f.hi) if f.hi > f.lo else None, density=True)
                dens = np.interp(x, 0.5 * (edges[1:] + edges[:-1]), h)
            else:
                dens = np.array([np.mean(col == v) for v in x])
            shapes["term"] += [t.name] * len(x)
            shapes["x"] += labels
            shapes["x_value"] += [float(v) if f.kind == "spline" else float("nan") for v in x]
            shapes["value"] += (f.basis(x, N_MAIN) @ c).tolist()
            shapes["density"] += dens.tolist()
        elif t.kind == "pair":
            a, b = (feats[s][0] for s in t.name.split(" x "))
            la, xa = _points(a, GRID2)
            lb, xb = _points(b, GRID2)
            H = a.basis(xa, N_PAIR) @ c.reshape(t.Bu.shape[1], t.Bi.shape[1]) @ b.basis(xb, N_PAIR).T
            inter["term"] += [t.name] * H.size
            inter["x"] += np.repeat(la, len(lb)).tolist()
            inter["z"] += np.tile(lb, len(la)).tolist()
            inter["value"] += H.ravel().tolist()
    M = model.U_group @ model.V_group.T
    K, L = M.shape
    groups = pa.table(
        {
            "user_group": np.repeat(np.arange(K), L),
            "item_group": np.tile(np.arange(L), K),
            "value": M.ravel(),
            "user_group_size": np.repeat(np.bincount(model.gu, minlength=K), L),
            "item_group_size": np.tile(np.bincount(model.gi, minlength=L), K),
        }
    )
    return {
        "shapes": pa.table(
            shapes,
            schema=pa.schema(
                [
                    ("term", pa.string()),
                    ("x", pa.string()),
                    ("x_value", pa.float64()),
                    ("value", pa.float64()),
                    ("density", pa.float64()),
                ]
            ),
        ),
        "interactions": pa.table(
            inter,
            schema=pa.schema([("term", pa.string()), ("x", pa.string()), ("z", pa.string()), ("value", pa.float64())]),
        ),
        "groups": groups,
    }


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _centred(H: np.ndarray) -> dict:
    """Colour limits symmetric about 0, so white means no effect."""
    v = float(np.abs(H).max()) or 1.0
    return {"vmin": -v, "vmax": v}


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def plot_pngs(tables: dict[str, pa.Table], ir: dict[str, float]) -> dict[str, bytes]:
    """File name → PNG bytes: one per main effect and interaction, the IR bars and the group heatmap."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out = {}
    shapes = tables["shapes"].to_pydict()
    for term in dict.fromkeys(shapes["term"]):
        idx = [k for k, t in enumerate(shapes["term"]) if t == term]
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(5, 4), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
        xv = np.array([shapes["x_value"][k] for k in idx])
        pos = xv if np.all(np.isfinite(xv)) else np.arange(len(idx))
        if np.all(np.isfinite(xv)):
            ax.plot(pos, [shapes["value"][k] for k in idx])
            ax2.fill_between(pos, [shapes["density"][k] for k in idx], alpha=0.5)
        else:
            ax.bar(pos, [shapes["value"][k] for k in idx])
            ax2.bar(pos, [shapes["density"][k] for k in idx], alpha=0.5)
            ax2.set_xticks(pos, [shapes["x"][k] for k in idx], rotation=90, fontsize=6)
        ax.set_title(f"{term} (IR {100 * ir.get(term, 0):.1f}%)")
        ax2.set_ylabel("density")
        out[f"main_{_safe(term)}.png"] = _png(fig, plt)
    inter = tables["interactions"].to_pydict()
    for term in dict.fromkeys(inter["term"]):
        idx = [k for k, t in enumerate(inter["term"]) if t == term]
        xs, zs = list(dict.fromkeys(inter["x"][k] for k in idx)), list(dict.fromkeys(inter["z"][k] for k in idx))
        H = np.array([inter["value"][k] for k in idx]).reshape(len(xs), len(zs))
        fig, ax = plt.subplots(figsize=(5, 4))
        im = ax.imshow(H, aspect="auto", origin="lower", cmap="RdBu_r", **_centred(H))
        fig.colorbar(im, ax=ax)
        a, b = term.split(" x ")
        ax.set(title=f"{term} (IR {100 * ir.get(term, 0):.1f}%)", ylabel=a, xlabel=b)
        ax.set_yticks(range(0, len(xs), max(1, len(xs) // 6)), xs[:: max(1, len(xs) // 6)], fontsize=6)
        ax.set_xticks(range(0, len(zs), max(1, len(zs) // 6)), zs[:: max(1, len(zs) // 6)], fontsize=6)
        out[f"interaction_{_safe(term)}.png"] = _png(fig, plt)
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(ir) + 1))
    names = list(ir)[::-1]
    ax.barh(names, [100 * ir[n] for n in names])
    ax.set(xlabel="importance ratio (%)", title="IR (eq. 5)")
    out["ir.png"] = _png(fig, plt)
    g = tables["groups"].to_pydict()
    K, L = max(g["user_group"]) + 1, max(g["item_group"]) + 1
    fig, ax = plt.subplots(figsize=(6, 5))
    M = np.array(g["value"]).reshape(K, L)
    im = ax.imshow(M, cmap="RdBu_r", aspect="auto", **_centred(M))
    fig.colorbar(im, ax=ax)
    ax.set(title="group preferences ŨṼᵀ", ylabel="user group", xlabel="item group")
    out["groups.png"] = _png(fig, plt)
    return out
