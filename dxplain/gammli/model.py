"""A fitted GAMMLI model: predictions, their exact additive decomposition, and the latent part's training data.

η(u, i) = intercept + Σ main effects + Σ manifest interactions + ⟨U_u, V_i⟩; the local table lists every
summand, so the contributions of a pair add up to its prediction (η, the log-odds for classification).

Training-data attributions of the latent part (docs/gammli.md derives them). At the optimum of eq. 4′
the user half-step is stationary: (λ+μ)U_u − λŨ_{k(u)} = Σ_j e_uj V_j with e_uj = w_uj(m_uj − ⟨U_u,V_j⟩), so

    ⟨U_u, V_i⟩ = λ/(λ+μ)·⟨Ũ_{k(u)}, V_i⟩ + Σ_{j∈Ω_u} e_uj ⟨V_j, V_i⟩ / (λ+μ),

a cluster-prior term plus one term per training rating of the user; symmetrically over the item's raters,
⟨U_u, V_i⟩ = λ/(λ+μ)·⟨U_u, Ṽ_{l(i)}⟩ + Σ_{v∈Ω_i} e_vi ⟨U_v, U_u⟩ / (λ+μ). (μ = 0 is the paper's eq. 4.)

Every user and item of the feature tables has a row; one more, all zeros, stands for an id that has no
features (admitted only with ``cold_start_missing``): its feature effects and latent vector are zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..io.features import FeatureTable, rows_of
from .terms import N_MAIN, N_PAIR, Additive, Feature, Term, column, main_term, pair_term

INTERCEPT, LATENT = "intercept", "latent"


def entity_bases(ft: FeatureTable, features: list[Feature], n_basis: int) -> dict[str, np.ndarray]:
    """Basis rows of every entity per feature, plus the all-zero row of an entity without features."""
    return {f.label: np.vstack([f.basis(column(ft, f), n_basis), np.zeros((1, f.size(n_basis)))]) for f in features}


def candidate_terms(users: FeatureTable, items: FeatureTable, fu: list[Feature], fi: list[Feature]):
    """(main-effect terms, every user×item pair term) over the two feature tables."""
    main_u, main_i = entity_bases(users, fu, N_MAIN), entity_bases(items, fi, N_MAIN)
    pair_u, pair_i = entity_bases(users, fu, N_PAIR), entity_bases(items, fi, N_PAIR)
    mains = [main_term(f, main_u[f.label]) for f in fu] + [main_term(f, main_i[f.label]) for f in fi]
    pairs = [pair_term(a, b, pair_u[a.label], pair_i[b.label]) for a in fu for b in fi]
    return mains, pairs


def index_pairs(users: FeatureTable, items: FeatureTable, user_ids, item_ids, cold_start_missing: bool = False):
    """Feature-table rows of the given ids; an id without features is an error unless ``cold_start_missing``
    (then it maps to the all-zero row after the last)."""
    out = []
    for side, ft, ids in (("user", users, user_ids), ("item", items, item_ids)):
        idx = rows_of(ft, ids)
        missing = idx < 0
        if missing.any() and not cold_start_missing:
            first = ids[int(np.flatnonzero(missing)[0])].as_py()
            raise InputError(
                f"{int(missing.sum())} pair(s) have a {side} without a row in the {side} feature "
                f"table (first: {first!r}); add its features, or pass --cold-start-missing to "
                "score it as cold with no features"
            )
        out.append(np.where(missing, len(ft), idx))
    return out[0], out[1]


@dataclass
class GAMMLIModel:
    task: str
    users: FeatureTable
    items: FeatureTable
    features: dict  # side → list[Feature]
    additive: Additive
    U: np.ndarray
    V: np.ndarray
    U_group: np.ndarray
    V_group: np.ndarray
    gu: np.ndarray
    gi: np.ndarray
    lam: float
    mu: float
    train: dict | None  # u, i, e (sorted by user): the latent part's training residuals
    seen_u: np.ndarray
    seen_i: np.ndarray
    info: dict = field(default_factory=dict)
    # instead of ``train`` when the fit left the residuals on its mapper (written by the flow's tasks)
    train_parts: list | None = field(default=None, repr=False)

    # ---- indices -------------------------------------------------------------------------------------
    def index(self, user_ids: pa.Array, item_ids: pa.Array, cold_start_missing: bool = False):
        return index_pairs(self.users, self.items, user_ids, item_ids, cold_start_missing)

    def cold(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """Pairs whose user or item had no training interaction (or no features)."""
        su, si = np.append(self.seen_u, False), np.append(self.seen_i, False)
        return ~(su[u] & si[i])

    # ---- predictions -----------------------------------------------------------------------------------
    def latent(self, u, i) -> np.ndarray:
        U, V = self._padded()
        return np.einsum("nk,nk->n", U[u], V[i])

    def _padded(self):
        z = np.zeros((1, self.U.shape[1]))
        return np.vstack([self.U, z]), np.vstack([self.V, z])

    def decompose(self, u, i) -> tuple[list[str], np.ndarray]:
        """Term names and the (n, n_terms) contributions: intercept, main effects, interactions, latent."""
        names = [t.name for t in self.additive.terms] + [LATENT]
        return names, np.column_stack([self.additive.contributions(u, i), self.latent(u, i)])

    def predict(self, u, i) -> np.ndarray:
        """η(u, i): the rating (regression) or the log-odds (classification)."""
        return self.additive.eta(u, i) + self.latent(u, i)

    def local_table(self, user_ids: pa.Array, item_ids: pa.Array, u, i) -> pa.Table:
        """One row per (user, item, term): its contribution and the pair's prediction."""
        names, C = self.decompose(u, i)
        pred = self.predict(u, i)
        n, T = C.shape
        rep = pa.array(np.repeat(np.arange(n), T))
        return pa.table(
            {
                "user": user_ids.take(rep),
                "item": item_ids.take(rep),
                "term": pa.array(np.tile(np.array(names, dtype=object), n).tolist(), pa.string()),
                "contribution": C.ravel(),
                "prediction": np.repeat(pred, T),
            }
        )

    # ---- training-data attributions ---------------------------------------------------------------------
    def latent_attributions(self, u, i, top_k: int = 10) -> tuple[dict, dict]:
        """Per pair: the cluster-prior terms and sums of the attributions (both sides), and the top-k
        training ratings by |attribution| on each side."""
        U, V = self._padded()
        tu, ti, e = self.train["u"], self.train["i"], self.train["e"]
        uptr = np.searchsorted(tu, np.arange(len(self.U) + 2))
        iorder = np.argsort(ti, kind="stable")
        iptr = np.searchsorted(ti[iorder], np.arange(len(self.V) + 2))
        gu, gi = np.append(self.gu, -1), np.append(self.gi, -1)
        diag = self.lam + self.mu
        shrink = self.lam / diag
        summary = {
            k: np.zeros(len(u))
            for k in ("latent", "user_prior", "user_attributions", "item_prior", "item_attributions")
        }
        top = {k: [] for k in ("pair", "side", "rank", "train_user", "train_item", "residual", "attribution")}
        for n, (a, b) in enumerate(zip(u, i)):
            summary["latent"][n] = U[a] @ V[b]
            Ut = self.U_group[gu[a]] if gu[a] >= 0 else np.zeros(U.shape[1])
            Vt = self.V_group[gi[b]] if gi[b] >= 0 else np.zeros(V.shape[1])
            summary["user_prior"][n], summary["item_prior"][n] = shrink * (Ut @ V[b]), shrink * (U[a] @ Vt)
            rows_u = np.arange(uptr[a], uptr[a + 1])
            rows_i = iorder[iptr[b] : iptr[b + 1]]
            for side, rr, att in (
                ("user", rows_u, e[rows_u] * (V[ti[rows_u]] @ V[b]) / diag),
                ("item", rows_i, e[rows_i] * (U[tu[rows_i]] @ U[a]) / diag),
            ):
                summary[f"{side}_attributions"][n] = att.sum()
                best = np.argsort(-np.abs(att), kind="stable")[:top_k]
                top["pair"] += [n] * len(best)
                top["side"] += [side] * len(best)
                top["rank"] += list(range(1, len(best) + 1))
                top["train_user"] += tu[rr[best]].tolist()
                top["train_item"] += ti[rr[best]].tolist()
                top["residual"] += e[rr[best]].tolist()
                top["attribution"] += att[best].tolist()
        return summary, top

    def attribution_tables(self, user_ids, item_ids, u, i, top_k: int = 10) -> dict[str, pa.Table]:
        s, t = self.latent_attributions(u, i, top_k)
        latent = pa.table({"user": user_ids, "item": item_ids, **s})
        pair = pa.array(np.asarray(t["pair"], dtype=np.int64))
        attributions = pa.table(
            {
                "user": user_ids.take(pair),
                "item": item_ids.take(pair),
                "side": pa.array(t["side"], pa.string()),
                "rank": pa.array(t["rank"], pa.int32()),
                "train_user": self.users.ids.take(pa.array(np.asarray(t["train_user"], dtype=np.int64))),
                "train_item": self.items.ids.take(pa.array(np.asarray(t["train_item"], dtype=np.int64))),
                "residual": pa.array(t["residual"], pa.float64()),
                "attribution": pa.array(t["attribution"], pa.float64()),
            }
        )
        return {"latent": latent, "attributions": attributions}

    # ---- storage ---------------------------------------------------------------------------------------
    def to_arrays(self) -> tuple[dict, dict]:
        """(arrays, meta) for ``io.gammli_model.save_model``; the training residuals go in the arrays when they
        were gathered (else the flow writes them as ``train/`` parts and sets ``meta["train_parts"]``)."""
        arrays = {
            "U": self.U,
            "V": self.V,
            "U_group": self.U_group,
            "V_group": self.V_group,
            "gu": self.gu,
            "gi": self.gi,
            "seen_u": self.seen_u,
            "seen_i": self.seen_i,
        }
        if self.train is not None:
            arrays.update({f"train_{k}": v for k, v in self.train.items()})
        terms = []
        for n, (t, c) in enumerate(zip(self.additive.terms, self.additive.coefs)):
            arrays[f"coef_{n}"] = c
            terms.append({"name": t.name, "kind": t.kind})
        meta = {
            "task": self.task,
            "lam": self.lam,
            "mu": self.mu,
            "terms": terms,
            "info": self.info,
            "features": {s: [f.to_json() for f in fs] for s, fs in self.features.items()},
            "categorical": {"user": list(self.users.categorical), "item": list(self.items.categorical)},
        }
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict, users: FeatureTable, items: FeatureTable) -> GAMMLIModel:
        features = {s: [Feature.from_json(d) for d in fs] for s, fs in meta["features"].items()}
        mains, pairs = candidate_terms(users, items, features["user"], features["item"])
        by_name = {t.name: t for t in mains + pairs}
        by_name[INTERCEPT] = Term(INTERCEPT, "intercept")
        terms = [by_name[t["name"]] for t in meta["terms"]]
        additive = Additive(terms, [arrays[f"coef_{n}"] for n in range(len(terms))])
        # The residuals are read per set of pairs (``io.gammli_model.read_training_rows``) unless kept inline.
        train = (
            {"u": arrays["train_u"], "i": arrays["train_i"], "e": arrays["train_e"]} if "train_u" in arrays else None
        )
        return cls(
            meta["task"],
            users,
            items,
            features,
            additive,
            arrays["U"],
            arrays["V"],
            arrays["U_group"],
            arrays["V_group"],
            arrays["gu"],
            arrays["gi"],
            meta["lam"],
            meta["mu"],
            train,
            arrays["seen_u"],
            arrays["seen_i"],
            meta["info"],
        )
