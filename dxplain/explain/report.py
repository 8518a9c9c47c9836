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
    "ials": "importance = α × sim. α ∝ c·(p − the model's score for it): c the entry's confidence, p 1 for a "
    "positive, 0 otherwise; sim = similarity of the two items (users) in the model's space.\n  Every entry the "
    "user (item) has not stored is in the loss too: their sum is one row, '(all unobserved items/users)'.",
    "biased": "importance = α × sim. α ∝ (rating − the model's fit of it); sim = similarity of the two items (users) "
    "in the model's space plus the bias kernel κ².\n  The '(item bias)' and '(user bias)' rows hold the other "
    "side's bias, itself a sum of α over that item's (user's) ratings.",
}
# How a side's extra row is shown (``explain.extra_rows``), by (kind, side).
EXTRA_LABELS = {
    ("bias", "item"): "(item bias)",
    ("bias", "user"): "(user bias)",
    ("unobserved", "item"): "(all unobserved items)",
    ("unobserved", "user"): "(all unobserved users)",
}
# An unobserved row this many times the score is said to cancel against the stored entries (the example:
# +46.7 and −45.8 for a score of 0.86).
CANCEL_RATIO = 5.0


def _kinds(rows: pa.Table) -> list[str]:
    """Each row's kind; a run written before the ``kind`` column holds training rows only."""
    if "kind" not in rows.column_names:
        return ["interaction"] * rows.num_rows
    return rows.column("kind").cast(pa.string()).to_pylist()


def _extra_lines(extra: pa.Table, side: str, score: float) -> list[str]:
    """A side's extra rows (the bias, or the unobserved entries' sum with its largest terms), and a note when the
    unobserved row and the stored entries are both large and cancel."""
    lines = []
    for rec in extra.to_pylist():
        kind = rec["kind_name"]
        if kind == "unobserved_term":
            who = rec["train_item"] if side == "item" else rec["train_user"]
            lines.append(f"    (unobserved: {str(who)[:27]:<27}, counted above) {rec['importance']:>+11.4f}")
            continue
        lines.append(f"    {EXTRA_LABELS.get((kind, side), kind):<40} {rec['importance']:>+11.4f}")
        if kind == "unobserved" and abs(rec["importance"]) >= CANCEL_RATIO * max(abs(score), 1e-12):
            stored = score - rec["importance"]
            lines.append(
                f"    note: the stored entries sum to {stored:+.4g} and the unobserved ones to "
                f"{rec['importance']:+.4g}; they cancel to the score {score:+.4g} (a small λ makes both large)"
            )
    return lines


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
    rows: pa.Table,
    items: pa.Table | None = None,
    users: pa.Table | None = None,
    limit: int = 10,
    loss: str = "squared",
    model_kind: str | None = None,
) -> str:
    """Render one target's attributions (rows of a run filtered to one user and item).

    Per side, the side's extra row (``explain.extra_rows``: a bias, or the unobserved entries' sum) with its
    importance, then the ``limit`` training rows that push the score up most and the ``limit`` that push it down
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
            else f"preference score {r0['prediction']:.3f}"
            if loss == "ials"
            else f"predicted rating {r0['prediction']:.2f}"
        )
        + f", score {r0['score']:+.3f})",
        "  " + LEGEND.get(model_kind if model_kind in LEGEND else loss, LEGEND["squared"]),
    ]
    rows = rows.append_column("kind_name", pa.array(_kinds(rows), pa.string()))
    num = f"{'α':>9} {'sim':>8} {'importance':>11}"
    for side, heading in (
        ("item", "the user's own ratings (item-based)"),
        ("user", "other users of this item (user-based)"),
    ):
        part = rows.filter(pc.equal(rows.column("side").cast(pa.string()), side))
        extra = part.filter(pc.not_equal(part.column("kind_name"), "interaction"))
        part = part.filter(pc.equal(part.column("kind_name"), "interaction"))
        lines.append(f"\n  {heading}: {part.num_rows} kept")
        lines += _extra_lines(extra, side, r0["score"])
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
