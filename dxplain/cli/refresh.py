"""``dxplain refresh`` and ``dxplain explain``: the nightly refresh, and one target's explanation from a run."""

from __future__ import annotations

import sys

from .common import flow_options, print_summary, run_flow, run_options


def cmd_refresh(a) -> int:
    from ..flows.refresh import CONSTRAINTS, refresh

    summary = run_flow(refresh, CONSTRAINTS, a)
    print_summary(summary)
    if summary.get("fidelity_warning"):
        print(f"warning: {summary['fidelity_warning']}", file=sys.stderr)
    out = str(summary["run"]).rsplit("/runs/", 1)[0]  # the output root, wherever --out/DXPLAIN_OUT put it
    print(f"\nResults: {summary['run']} (LATEST in {out} points here)")
    from ..io import runs

    table = runs.open_run(summary["run"]).head(1)
    if table.num_rows:
        first = table.to_pylist()[0]
        print(f"\nExample — dxplain explain --run {summary['run']} --user {first['user']} --item {first['item']}\n")
        print_explanation(summary["run"], str(first["user"]), str(first["item"]), a.dataset, limit=5)
    return 0


def print_explanation(run_path: str, user: str, item: str, dataset: str | None, limit: int) -> None:
    import pyarrow as pa
    import pyarrow.dataset as pads

    from ..datasets import resolve_dataset
    from ..explain.report import format_explanation
    from ..io import runs
    from ..io.interactions import index_of

    run = runs.resolve_run(run_path)
    dset = runs.open_run(run)
    summary = runs.read_manifest(run)["summary"]
    ds = resolve_dataset(dataset or summary["dataset"], fetch=False)
    u = ds.users.column("id").take(pa.array(index_of(pa.array([user]), ds.interactions.user_ids, "user", "--user")))
    i = ds.items.column("id").take(pa.array(index_of(pa.array([item]), ds.interactions.item_ids, "item", "--item")))
    rows = dset.to_table(filter=(pads.field("user") == u[0].as_py()) & (pads.field("item") == i[0].as_py()))
    print(format_explanation(rows, ds.items, ds.users, limit=limit, loss=summary.get("loss", "squared")))


def cmd_explain(a) -> int:
    print_explanation(a.run, a.user, a.item, a.dataset, a.limit)
    return 0


def register(sub) -> None:
    from ..flows.refresh import refresh

    r = sub.add_parser("refresh", help="explain every user's top-N recommendations and publish a run")
    flow_options(r, refresh, [
        "dataset", "model", "top_n", "top_k", "targets", "k", "lam", "seed", "max_sweeps", "newton_steps",
        "implicit", "neg_samples", "neg_weight", "tol", "strict", "keep"
    ])
    run_options(r, refresh, "user shards (default 4 per worker, or more so that no shard holds over 8M output rows)",
                "run the shards")
    r.set_defaults(func=cmd_refresh)

    e = sub.add_parser("explain", help="print one target's explanation from a run")
    e.add_argument("--run", required=True, help="a run folder, or an output folder (follows LATEST)")
    e.add_argument("--user", required=True)
    e.add_argument("--item", required=True)
    e.add_argument("--dataset", help="dataset for titles and features (default: the run's)")
    e.add_argument("--limit", type=int, default=10, help="rows shown per side")
    e.set_defaults(func=cmd_explain)
