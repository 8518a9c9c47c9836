"""A fitted Kolmogorov model as the tables and metrics of ``dxplain kolmogorov fit``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..interactions import Interactions
from . import rules as R
from .data import test_targets
from .fit import KolmogorovModel


def _titled(table: pa.Table, items: pa.Table, column: str, index: np.ndarray) -> pa.Table:
    if "title" in items.column_names:
        table = table.append_column(f"{column}_title", items.column("title").take(pa.array(index)))
    return table


def rules_table(
    m: KolmogorovModel, train: Interactions, items: pa.Table, like_threshold: float, max_rules: int = 2_000_000
) -> tuple[pa.Table, int]:
    """``antecedent``, ``consequent`` (original item ids), ``support`` (training users liking both), titles;
    and the number of rules in the model (more than the table holds when capped at ``max_rules``)."""
    r = R.mine_rules(m.psi, train, like_threshold, max_rules)
    ids = train.item_ids
    t = pa.table(
        {
            "antecedent": ids.take(pa.array(r["antecedent"])),
            "consequent": ids.take(pa.array(r["consequent"])),
            "support": pa.array(r["support"]),
        }
    )
    t = _titled(t, items, "antecedent", r["antecedent"])
    return _titled(t, items, "consequent", r["consequent"]), r["total"]


def influence_table(m: KolmogorovModel, train: Interactions, items: pa.Table) -> pa.Table:
    """``item``, ``beta`` (A.2), ``maximal`` (ψ_i = 1), sorted by β descending."""
    beta, maximal = R.influence(m.psi)
    order = np.lexsort((np.arange(len(beta)), -beta))
    t = pa.table({"item": train.item_ids.take(pa.array(order)), "beta": beta[order], "maximal": maximal[order]})
    return _titled(t, items, "item", order)


def rmse(pred: np.ndarray, target: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - target) ** 2)))


def test_metrics(m: KolmogorovModel, held: Interactions, feedback: str, r_max: float, like_threshold: float) -> dict:
    """``nrmse`` = RMSE of p̂ against rating / R_max (the paper's KM NRMSE) or the 0/1 like; ``rmse_stars`` =
    RMSE of R_max·p̂ against the rating (explicit only)."""
    pred = m.predict(held.user, held.item)
    return {
        "nrmse": rmse(pred, test_targets(held.rating, feedback, r_max, like_threshold)),
        "rmse_stars": rmse(r_max * pred, held.rating) if feedback == "explicit" else None,
    }


def held_out_rules(
    m: KolmogorovModel,
    train: Interactions,
    held: Interactions,
    like_threshold: float,
    seed: int,
    max_rules: int = 2_000_000,
) -> dict:
    """Held-out precision of the mined rules (users who like i also like j) against random item pairs of
    the same popularity deciles; both directions, since the probability model implies "likes j ⇒ likes i"
    when supp ψ_j ⊆ supp ψ_i."""
    popularity = train.item_degree()
    A = R.adjacency(m.psi, antecedents=R.capped_antecedents(m.psi, popularity, max_rules)).tocoo()
    i, j = A.row.astype(np.int64), A.col.astype(np.int64)
    if len(i) == 0:
        return {"rules": 0}
    ri, rj = R.popularity_matched(i, j, popularity, seed)
    return {
        "rules": int(len(i)),
        "mined": R.rule_precision(i, j, held, like_threshold),
        "random_same_popularity": R.rule_precision(ri, rj, held, like_threshold),
    }


def format_why(
    user,
    item,
    theta_u: np.ndarray,
    psi: np.ndarray,
    i: int,
    item_ids: pa.Array,
    items: pa.Table | None = None,
    popularity: np.ndarray | None = None,
    top: int = 3,
) -> str:
    """A readable ``rules.why``: p̂_ui and the elementary events that carry it, each with its share θ_ud
    and its most typical items (titled where ``items`` has titles)."""
    from .rules import why

    titles = {}
    if items is not None and "title" in items.column_names:
        titles = dict(zip(items.column("id").to_pylist(), items.column("title").to_pylist()))
    ids = item_ids.to_pylist()

    def name(j: int) -> str:
        return str(titles.get(ids[j]) or ids[j])

    events = why(theta_u, psi, i, popularity, top)
    p = float(theta_u @ psi[i].astype(np.float64))
    lines = [
        f"p̂(user {user} likes {name(i)}) = {p:.3f}, the sum of θ over the {len(events)} elementary "
        f"event(s) in which {name(i)} is liked:"
    ]
    for e in events:
        lines.append(
            f"  event {e['event']:>2}  θ = {e['share']:.3f}  typical items: "
            + "; ".join(name(j) for j in e["typical_items"])
        )
    if not events:
        lines.append("  none: the user puts no probability on an event in which this item is liked")
    return "\n".join(lines)
