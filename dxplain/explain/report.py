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


def format_explanation(rows: pa.Table, items: pa.Table | None = None, users: pa.Table | None = None,
                       limit: int = 10, loss: str = "squared") -> str:
    """Render one target's attributions (rows of a run filtered to one user and item)."""
    if rows.num_rows == 0:
        return "no attributions for this (user, item) in the run"
    r0 = rows.slice(0, 1).to_pylist()[0]
    lines = [f"Why user {r0['user']} gets {_title(items, r0['item'])} "
             f"(rank {r0['rec_rank']}, "
             + (f"probability σ(score) {r0['prediction']:.3f}" if loss == "bce" else f"predicted rating {r0['prediction']:.2f}")
             + f", score {r0['score']:+.3f})"]
    for side, heading in (("item", "the user's own ratings (item-based)"),
                          ("user", "other users of this item (user-based)")):
        part = rows.filter(pc.equal(rows.column("side").cast(pa.string()), side))
        part = part.take(pc.sort_indices(part, [("importance", "descending")]))
        lines.append(f"\n  {heading}: {part.num_rows} shown")
        if side == "item":
            titles = _lookup(items, part.column("train_item").combine_chunks(), "title")
            genres = _lookup(items, part.column("train_item").combine_chunks(), "genres")
            lines.append(f"  {'title':<42} {'rating':>6}  {'genres':<30} {'importance':>11}")
            for rec, t, g in zip(part.to_pylist()[:limit], titles, genres):
                g = ", ".join(g) if isinstance(g, list) else (g or "")
                lines.append(f"  {str(t or rec['train_item'])[:42]:<42} {rec['rating']:>6.1f}  {g[:30]:<30} "
                             f"{rec['importance']:>+11.4f}")
        else:
            ages = _lookup(users, part.column("train_user").combine_chunks(), "age")
            occs = _lookup(users, part.column("train_user").combine_chunks(), "occupation")
            lines.append(f"  {'user':<10} {'age':>4} {'occupation':<16} {'rating':>6} {'importance':>11}")
            for rec, a, o in zip(part.to_pylist()[:limit], ages, occs):
                lines.append(f"  {str(rec['train_user']):<10} {str(a or ''):>4} {str(o or ''):<16} "
                             f"{rec['rating']:>6.1f} {rec['importance']:>+11.4f}")
    return "\n".join(lines)


def format_prototypes(prototypes: pa.Table, targets: pa.Table, items: pa.Table | None = None, limit: int = 10) -> str:
    """Render a prototype selection: the predictions explained, then the training interactions chosen."""
    tl = targets.to_pylist()
    users = sorted({str(t["user"]) for t in tl})
    who = f"user {users[0]}'s list of" if len(users) == 1 else f"{len(users)} users'"
    lines = [f"{prototypes.num_rows} training interactions explain {who} {len(tl)} predictions:"]
    lines += [f"    {_title(items, t['item'])[:50]:<50} predicted {t['prediction']:.2f}" for t in tl[:limit]]
    lines.append(f"\n  {'#':>3} {'user':<8} {'title':<42} {'rating':>6} {'weight':>9} {'left':>6}")
    for p in prototypes.to_pylist()[:limit]:
        lines.append(f"  {p['rank']:>3} {str(p['user']):<8} {_title(items, p['item'])[:42]:<42} {p['rating']:>6.1f} "
                     f"{p['weight']:>+9.3g} {p['objective']:>6.1%}")
    lines.append("  (left: share of ‖μ_T‖² still unexplained after adding that prototype)")
    return "\n".join(lines)
