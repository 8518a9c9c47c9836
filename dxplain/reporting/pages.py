"""The two report pages: a refresh run's, and a result folder's (evaluate, negatives, prototypes, …)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..explain.report import EXTRA_LABELS
from ..explain.run_rows import ERROR_DECADES, SIDES
from .aggregate import SHARE_EDGES, SIGNS, Recommendation, RunRows, fidelity_decades, rows_per_target, summary_rows
from .html import SEARCH_SCRIPT, bar, esc, grid, key_value_table, number, page, png, pyplot, svg

SIDE_NAMES = {"item": "item side (the user's own ratings)", "user": "user side (other users of the item)"}
FIDELITY_SOURCES = {
    "recorded": "as the refresh measured it: every training row of a side summed, whatever top_k kept",
    "rows (all attributions)": "measured from the run's rows (it kept every attribution, top_k 0)",
    "rows (top-k only)": "NOT the fidelity: this run predates recorded per-target errors and kept only the top-k "
    "attributions, so this is how much of the score its kept rows leave out",
}


@dataclass
class Labels:
    """Display names of items (title (year), genres) and users (age, occupation), where the dataset has them."""

    items: dict = field(default_factory=dict)
    genres: dict = field(default_factory=dict)
    users: dict = field(default_factory=dict)

    @classmethod
    def from_tables(cls, items: pa.Table | None, users: pa.Table | None) -> Labels:
        def column(table, name):
            return table.column(name).to_pylist() if table is not None and name in table.column_names else None

        out = cls()
        ids, titles, years, genres = (column(items, c) for c in ("id", "title", "year", "genres"))
        if ids and titles:
            out.items = {i: f"{t} ({y})" if y else t for i, t, y in zip(ids, titles, years or [None] * len(ids)) if t}
        if ids and genres:
            out.genres = {i: ", ".join(g) if isinstance(g, list) else (g or "") for i, g in zip(ids, genres)}
        ids, ages, jobs = (column(users, c) for c in ("id", "age", "occupation"))
        if ids and (ages or jobs):
            out.users = {
                i: " ".join(str(x) for x in (a, o) if x)
                for i, a, o in zip(ids, ages or [None] * len(ids), jobs or [None] * len(ids))
            }
        return out

    def item(self, item) -> str:
        return self.items.get(item, f"item {item}")


def _decade_label(e: int) -> str:
    return f"<1e{e + 1}" if e == ERROR_DECADES[0] else (f"≥1e{e}" if e == ERROR_DECADES[-1] else f"1e{e}")


def fidelity_section(shards: list[dict], rows: RunRows, top_k: int | None, tol: float | None = None) -> str:
    """Targets per decade of relative error |Σ attributions − score| / |score|, per side: a figure (with the
    run's ``--tol`` as a dashed line) and a table."""
    decades, source = fidelity_decades(shards, rows, top_k)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
    x = np.arange(len(ERROR_DECADES))
    for ax, side in zip(axes, SIDES):
        ax.bar(x, [decades[side].get(str(e), 0) for e in ERROR_DECADES], color="#48a")
        ax.set_yscale("log")  # a handful of poorly explained targets must stay visible beside thousands
        if tol:  # bar b spans [10^e, 10^(e+1)) around x = b, so 10^t sits at t − e₀ − 0.5
            ax.axvline(np.log10(tol) - ERROR_DECADES[0] - 0.5, color="#d54", ls="--", lw=1, label=f"--tol {tol:g}")
            ax.legend()
        ax.set_xticks(x[::3], [_decade_label(e) for e in ERROR_DECADES][::3])
        ax.set(title=SIDE_NAMES[side], xlabel="relative error |Σ attributions − score| / |score|")
    axes[0].set_ylabel("targets")
    fig.tight_layout()
    cells = "".join(
        f'<tr><td>{esc(side)}</td><td>{esc(_decade_label(e))}</td><td class="n" data-side="{side}" '
        f'data-decade="{e}">{n}</td></tr>\n'
        for side in SIDES
        for e in ERROR_DECADES
        if (n := decades[side].get(str(e), 0))
    )
    return (
        f"<h2>Fidelity</h2>\n<p class=note>Each side's attributions sum to the score at the model's optimum; "
        f"the relative error per target says how close this run is. Source: {esc(FIDELITY_SOURCES[source])}.</p>\n"
        f'<figure>{svg(fig)}</figure>\n<table id="fidelity" data-source="{esc(source)}">'
        f"<tr><th>side</th><th>decade</th><th>targets</th></tr>\n{cells}</table>"
    )


def attributions_section(rows: RunRows) -> str:
    """Attributions per target: how many the run kept per side, and each one's share of the score."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3))
    for side, color in zip(SIDES, ("#48a", "#a84")):
        counts = rows_per_target(rows, side)
        if len(counts):
            axes[0].hist(
                counts, bins=min(40, max(1, int(counts.max() - counts.min()) + 1)), alpha=0.6, color=color, label=side
            )
    axes[0].set(title="attributions kept per target", xlabel="rows", ylabel="targets")
    axes[0].legend()
    centers = np.sqrt(SHARE_EDGES[:-1] * SHARE_EDGES[1:])  # inner bins only: the two open-ended ones are in the table
    for ax, side in zip(axes[1:], SIDES):
        for sign, color in zip(SIGNS, ("#2a7", "#d54")):
            ax.step(centers, rows.shares[(side, sign)][1:-1], where="mid", color=color, label=sign)
        ax.set_xscale("log")
        ax.set(title=SIDE_NAMES[side], xlabel="|importance| / |score|", ylabel="attributions")
        ax.legend()
    fig.tight_layout()
    stats = []
    for side in SIDES:
        counts = rows_per_target(rows, side)
        shares = {sign: rows.shares[(side, sign)] for sign in SIGNS}
        stats.append(
            [
                side,
                len(counts),
                int(counts.sum()),
                *([int(counts.min()), float(np.median(counts)), int(counts.max())] if len(counts) else ["—"] * 3),
                *(int(shares[sign].sum()) for sign in SIGNS),
            ]
        )
    table = grid(
        ["side", "targets", "attributions", "min per target", "median", "max", "positive", "negative"],
        stats,
        "attributions",
    )
    return (
        f"<h2>Attributions per target</h2>\n<p class=note>How many attributions the run kept per target and "
        f"side (top_k of each sign, or all), and the share of its target's score each one carries.</p>\n"
        f"<figure>{svg(fig)}</figure>\n{table}"
    )


def _reason_rows(rec: Recommendation, labels: Labels) -> str:
    # Bars share one scale per recommendation (its largest reason is full width); end tags are left out, as
    # HTML allows, because these rows are most of a page's bytes.
    scale = max((abs(r.importance) for rs in rec.reasons.values() for r in rs), default=0.0)
    out = []
    for side in SIDES:
        if not rec.reasons[side]:
            continue
        out.append(f"<tr><td colspan=4 class=side>{esc(SIDE_NAMES[side])}")
        for r in rec.reasons[side]:
            if r.kind != "interaction":  # a side's extra row: a bias, or every unobserved entry's term summed
                label = EXTRA_LABELS.get((r.kind, side), r.kind)
                out.append(f"<tr><td><i>{esc(label)}</i><td>{bar(r.importance, scale)}<td>{r.importance:+.4f}")
                continue
            if side == "item":
                who = f"{esc(labels.item(r.train_item))} <small>{esc(labels.genres.get(r.train_item, ''))}</small>"
            else:
                who = f"user {esc(r.train_user)} <small>{esc(labels.users.get(r.train_user, ''))}</small>"
            out.append(f"<tr><td>{who}<td>{number(r.rating)}{bar(r.importance, scale)}<td>{r.importance:+.4f}")
    return "\n".join(out)


def user_block(user, recs: list[Recommendation], labels: Labels, prediction: str) -> str:
    """One user's recommendations, each with its top reasons and their bars, in a ``<details>``."""
    titles = [labels.item(r.item) for r in recs]
    search = " ".join([str(user), *titles]).lower()
    rows = []
    for rec, title in zip(recs, titles):
        rows.append(
            f'<tr class=rec data-item="{esc(rec.item)}"><th>{rec.rec_rank}. {esc(title)}<th>'
            f"{number(rec.prediction)}<th><th>score {rec.score:+.4f}"
        )
        rows.append(_reason_rows(rec, labels))
    head = f"<tr><th>recommendation / reason<th>{esc(prediction)} / rating<th colspan=2>importance"
    return (
        f'<details data-user="{esc(user)}" data-search="{esc(search)}"><summary>user {esc(user)} '
        f"<small>{esc(labels.users.get(user, ''))}</small> — {esc(', '.join(titles[:3]))}"
        f"{'…' if len(titles) > 3 else ''}</summary>\n<table class=u>{head}\n" + "\n".join(rows) + "</table></details>"
    )


def users_section(recs: dict, shown_of: tuple[int, int], labels: Labels, prediction: str, reasons: int) -> str:
    shown, total = shown_of
    blocks = "\n".join(user_block(u, r, labels, prediction) for u, r in recs.items())
    return (
        f'<h2>Users</h2>\n<p class=note id="users-shown" data-shown="{shown}" data-total="{total}">{shown} of '
        f"{total} users shown (the first by id; <code>--users</code> shows more), each recommendation with its "
        f"{reasons} most important reasons per side, like <code>dxplain explain</code>. A positive importance "
        f"pushed the score up (green), a negative one down (red); each recommendation's largest reason "
        f"shown is a full bar. Importance = α (the residual on that rating) × the similarity in the model's space, "
        f"so a "
        f"low rating can push a score up. A side's first row in italics is not a training row: the other side's "
        f"bias (biased MF), or the sum over every entry nothing is stored for (iALS).</p>\n"
        f'<p><input type="search" id="search" placeholder="filter by user id or title"></p>\n{blocks}'
    )


def headline(summary: dict) -> str:
    """Data, model, targets and whether the explanations add up, in one short list."""
    fid = summary.get("fidelity_max_rel_error") or {}
    ok = summary.get("fidelity_ok")
    items = [
        ("data", summary.get("dataset")),
        ("model", f"{summary.get('model_kind', '')} ({summary.get('loss', '')})"),
        ("explained", f"{summary.get('targets')} recommendations of {summary.get('users')} users"),
        (
            "exact",
            f"{'yes' if ok else 'NO'}: attributions miss the score by at most "
            + " · ".join(f"{v:.1e} ({k})" for k, v in fid.items() if v is not None)
            + f", against --tol {summary.get('fidelity_tol')}",
        ),
    ]
    changes = summary.get("changes")
    if changes:
        items.append(
            (
                "since the last run",
                f"{changes['users_changed']} users' recommendations changed ({changes['entered']} entered, "
                f"{changes['left']} left) since {changes['from']}; `dxplain diff` says why",
            )
        )
    start = summary.get("training_start") or {}
    if start.get("start") == "warm":
        items.append(
            (
                "training",
                f"warm from the last run's model: {start.get('rows_added')} rows added, {start.get('users_new')} "
                f"new users, {start.get('items_new')} new items, {start.get('sweeps')} sweeps",
            )
        )
    return "<dl class=headline>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(str(v))}</dd>" for k, v in items) + "</dl>"


CHANGES_SHOWN = 50


def changes_section(changed: pa.Table | None) -> str:
    """The first ``CHANGES_SHOWN`` rows of what changed since the run before (``_meta/changes.parquet``)."""
    if changed is None or changed.num_rows == 0:
        return ""
    head = changed.slice(0, CHANGES_SHOWN).select(["user", "item", "change", "rank_from", "rank_to"])
    return "\n".join(
        [
            "<h2>What changed since the last run</h2>",
            f"<p class=note>first {head.num_rows} of {changed.num_rows} changes</p>",
            grid(head.column_names, [list(r.values()) for r in head.to_pylist()]),
        ]
    )


def run_page(
    name: str,
    summary: dict,
    shards: list[dict],
    rows: RunRows,
    recs: dict,
    users_total: int,
    labels: Labels,
    reasons: int,
    changed: pa.Table | None = None,
) -> str:
    """A refresh run's page: what a reader needs first (the run's headline, then its users' explanations), the
    fidelity and attribution histograms, and the run's internals (every summary entry) collapsed at the end."""
    body = "\n".join(
        [
            f"<p class=note>Run folder <code>{esc(summary.get('run', name))}</code>.</p>",
            headline(summary),
            changes_section(changed),
            users_section(recs, (len(recs), users_total), labels, summary.get("prediction", "prediction"), reasons),
            fidelity_section(shards, rows, summary.get("top_k"), summary.get("fidelity_tol")),
            attributions_section(rows),
            "<details id=internals><summary>Run internals: every summary entry</summary>",
            key_value_table(summary_rows(summary), "summary"),
            "</details>",
        ]
    )
    return page(f"dxplain run {name}", body, SEARCH_SCRIPT)


def results_page(
    name: str, summary: dict, images: dict[str, bytes], texts: dict[str, str], tables: dict[str, tuple[pa.Table, int]]
) -> str:
    """A result folder's page: its summary, every PNG it holds, its text files and the first rows of its tables."""
    parts = [
        f"<p class=note>Result folder <code>{esc(summary.get('folder', name))}</code>.</p>",
        "<h2>Summary</h2>",
        key_value_table(summary_rows(summary), "summary"),
    ]
    for file, data in images.items():
        parts += [f"<h2>{esc(file)}</h2>", f"<figure>{png(data, file)}</figure>"]
    for file, text in texts.items():
        parts += [f"<h2>{esc(file)}</h2>", f"<pre>{esc(text)}</pre>"]
    for file, (head, total) in tables.items():
        rows = [
            [json.dumps(v, default=str) if isinstance(v, (list, dict)) else v for v in r.values()]
            for r in head.to_pylist()
        ]
        parts += [
            f"<h2>{esc(file)}</h2>",
            f"<p class=note>first {head.num_rows} of {total} rows</p>",
            grid(head.column_names, rows),
        ]
    return page(f"dxplain {name}", "\n".join(parts))
