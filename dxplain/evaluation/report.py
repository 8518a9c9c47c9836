"""The case-deletion report: AUC-DEL± per method with 95% CIs (Markdown) and the mean curves (PNG)."""

from __future__ import annotations


def curve_aucs(rows: list[dict]) -> dict:
    """{(method, side, trial, target): AUC-DEL of that curve}, the mean of its Δ over the k sequence."""
    from collections import defaultdict

    curves = defaultdict(list)
    for r in rows:
        curves[(r["method"], r["side"], r["trial"], r["target"])].append(float(r["delta"]))
    return {key: sum(d) / len(d) for key, d in curves.items()}


def auc_del(rows: list[dict]) -> dict:
    """{(method, side): Summary} of AUC-DEL over trials × targets."""
    from collections import defaultdict

    from .deletion import summarise

    per = defaultdict(list)
    for (method, side, _, _), auc in curve_aucs(rows).items():
        per[(method, side)].append(auc)
    return {key: summarise(v) for key, v in per.items()}


def auc_del_markdown(rows: list[dict], ms: dict, title: str) -> str:
    """AUC-DEL₊ (lower is better) and AUC-DEL₋ (higher is better) per method, with ms per explanation."""
    table = auc_del(rows)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = [
        f"### {title}",
        "",
        "| method | AUC-DEL₊ (↓) | AUC-DEL₋ (↑) | curves | ms per explained target |",
        "|---|---|---|---|---|",
    ]
    for m in methods:
        p, n = table.get((m, "DEL+")), table.get((m, "DEL-"))
        cell = lambda s: f"{s.mean:+.4f} ± {s.half_width:.4f}" if s and s.count else "—"  # noqa: E731
        t = ms.get(m)
        lines.append(
            f"| {m} | {cell(p)} | {cell(n)} | {p.count if p else 0} + {n.count if n else 0} | "
            f"{'failed' if t is None else f'{t:.3g}'} |"
        )
    failures = {}
    for r in rows:
        if r.get("failure"):
            failures.setdefault((r["method"], r["failure"]), set()).add((r["trial"], r["target"]))
    lines += [""] * bool(failures) + [
        f"* {m} failed on {len(where)} target(s): {why}" for (m, why), where in failures.items()
    ]
    return "\n".join(lines) + "\n"


def deletion_plot_png(rows: list[dict], title: str) -> bytes | None:
    """Mean DEL± against the share of samples removed, one line per method (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    import io
    from collections import defaultdict

    import numpy as np

    acc = defaultdict(list)
    for r in rows:
        acc[(r["method"], r["side"], r["fraction"])].append(r["delta"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, side in zip(axes, ("DEL+", "DEL-")):
        for m in dict.fromkeys(r["method"] for r in rows):
            fr = sorted({f for (mm, s, f) in acc if mm == m and s == side})
            ax.plot([100 * f for f in fr], [np.mean(acc[(m, side, f)]) for f in fr], marker="o", label=m)
        ax.axhline(0, color="k", lw=0.5)
        ax.set(title=f"{title}: {side}", xlabel="k as % of the candidate samples", ylabel="mean Δ prediction")
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
