"""Human-readable explanations: the paper's Table 3 layout (title, rating, genres, importance, side)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def _lookup(table: pa.Table | None, ids: pa.Array, column: str) -> list:
    if table is None or column not in table.column_names:
        return [None] * len(ids)
    pos = pc.index_in(ids.cast(table.column("id").type), value_set=table.column("id"))
    return table.column(column).take(pc.fill_null(pos, 0)).to_pylist() if len(ids) else []


def _title(items, item_id) -> str:
    t = _lookup(items, pa.array([item_id]), "title")[0]
    y = _lookup(items, pa.array([item_id]), "year")[0]
    return f"{t} ({y})" if t and y else (t or str(item_id))


LEGEND = {
    "squared": "importance = α × sim. α ∝ (rating − the model's fit of it); sim = similarity of the two items "
    "(users) in the model's space.\n  Positive pushes this score up, so a low rating can push up: "
    "the model fits it too high (α < 0) on an item unlike this one (sim < 0).",
    "bce": "importance = α × sim. α ∝ (label − σ(the model's score for it)); sim = similarity of the two items "
    "(users) in the model's space.\n  Positive pushes this score up; a sampled negative (label 0) "
    "pushes up when its item is unlike this one (sim < 0).",
}


def _side_blocks(part: pa.Table, limit: int) -> list[tuple[str, list[dict]]]:
    """The ``limit`` rows pushing the score up most, and the ``limit`` pushing it down most."""
    imp = part.column("importance")
    up = part.filter(pc.greater(imp, 0))
    down = part.filter(pc.less(imp, 0))
    up = up.take(pc.sort_indices(up, [("importance", "descending")])).slice(0, limit).to_pylist()
    down = down.take(pc.sort_indices(down, [("importance", "ascending")])).slice(0, limit).to_pylist()
    return [
        (f"pushing up: {len(up)} of {pc.sum(pc.greater(imp, 0)).as_py() or 0}", up),
        (f"pushing down: {len(down)} of {pc.sum(pc.less(imp, 0)).as_py() or 0}", down),
    ]


def format_explanation(
    rows: pa.Table, items: pa.Table | None = None, users: pa.Table | None = None, limit: int = 10, loss: str = "squared"
) -> str:
    """Render one target's attributions (rows of a run filtered to one user and item).

    Per side, the ``limit`` attributions that push the score up most and the ``limit`` that push it down
    most, with α and the similarity they multiply, so that a surprising sign explains itself. Counts are
    of the rows the run kept (``--top-k`` per sign and side).
    """
    if rows.num_rows == 0:
        return (
            "no attributions for this (user, item) in the run: a run explains each user's top-N "
            "recommendations (items the user has not rated) or the --targets it was given; list the user's "
            "with `dxplain report`, or run a refresh with --targets"
        )
    r0 = rows.slice(0, 1).to_pylist()[0]
    lines = [
        f"Why user {r0['user']} gets {_title(items, r0['item'])} "
        f"(rank {r0['rec_rank']}, "
        + (
            f"probability σ(score) {r0['prediction']:.3f}"
            if loss == "bce"
            else f"predicted rating {r0['prediction']:.2f}"
        )
        + f", score {r0['score']:+.3f})",
        "  " + LEGEND.get(loss, LEGEND["squared"]),
    ]
    num = f"{'α':>9} {'sim':>8} {'importance':>11}"
    for side, heading in (
        ("item", "the user's own ratings (item-based)"),
        ("user", "other users of this item (user-based)"),
    ):
        part = rows.filter(pc.equal(rows.column("side").cast(pa.string()), side))
        lines.append(f"\n  {heading}: {part.num_rows} kept")
        for label, recs in _side_blocks(part, limit):
            if not recs:
                continue
            lines.append(f"   {label}")
            if side == "item":
                ids = pa.array([r["train_item"] for r in recs])
                titles, genres = _lookup(items, ids, "title"), _lookup(items, ids, "genres")
                lines.append(f"    {'title':<40} {'rating':>6}  {'genres':<24} {num}")
                for rec, t, g in zip(recs, titles, genres):
                    g = ", ".join(g) if isinstance(g, list) else (g or "")
                    lines.append(
                        f"    {str(t or rec['train_item'])[:40]:<40} {rec['rating']:>6.1f}  {g[:23]:<24} "
                        + _numbers(rec)
                    )
            else:
                ids = pa.array([r["train_user"] for r in recs])
                ages, occs = _lookup(users, ids, "age"), _lookup(users, ids, "occupation")
                lines.append(f"    {'user':<10} {'age':>4} {'occupation':<16} {'rating':>6} {num}")
                for rec, age, occ in zip(recs, ages, occs):
                    lines.append(
                        f"    {str(rec['train_user']):<10} {str(age or ''):>4} {str(occ or ''):<16} "
                        f"{rec['rating']:>6.1f} " + _numbers(rec)
                    )
    return "\n".join(lines)


def _numbers(rec: dict) -> str:
    return f"{rec['global_importance']:>+9.2e} {rec['local_importance']:>+8.3f} {rec['importance']:>+11.4f}"


def format_prototypes(prototypes: pa.Table, targets: pa.Table, items: pa.Table | None = None, limit: int = 10) -> str:
    """Render a prototype selection: the predictions explained, then the training interactions chosen."""
    tl = targets.to_pylist()
    users = sorted({str(t["user"]) for t in tl})
    who = f"user {users[0]}'s list of" if len(users) == 1 else f"{len(users)} users'"
    lines = [f"{prototypes.num_rows} training interactions explain {who} {len(tl)} predictions:"]
    lines += [f"    {_title(items, t['item'])[:50]:<50} predicted {t['prediction']:.2f}" for t in tl[:limit]]
    lines.append(f"\n  {'#':>3} {'user':<8} {'title':<42} {'rating':>6} {'weight':>9} {'left':>6}")
    for p in prototypes.to_pylist()[:limit]:
        lines.append(
            f"  {p['rank']:>3} {str(p['user']):<8} {_title(items, p['item'])[:42]:<42} {p['rating']:>6.1f} "
            f"{p['weight']:>+9.3g} {p['objective']:>6.1%}"
        )
    lines.append("  (left: share of ‖μ_T‖² still unexplained after adding that prototype)")
    return "\n".join(lines)
