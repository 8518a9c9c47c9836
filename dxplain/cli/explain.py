"""``dxplain explain``: one target's explanation from a run (reads files only: no flow, no Prefect)."""

from __future__ import annotations

from .common import target_arguments


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
    if rows.num_rows == 0:
        from ..errors import InputError

        raise InputError(f"--user {user} --item {item}: not explained in {run}; a run explains each user's "
                         "top-N recommendations (items the user has not rated) or the --targets it was given: "
                         "pick one of them (`dxplain report` lists them), or refresh with --targets")
    print(format_explanation(rows, ds.items, ds.users, limit=limit, loss=summary.get("loss", "squared")))


def cmd_explain(a) -> int:
    if a.limit < 1:
        from ..errors import InputError

        raise InputError(f"--limit {a.limit}: give an integer ≥ 1 (rows shown per side and sign)")
    print_explanation(a.run, a.user, a.item, a.dataset, a.limit)
    return 0


def register(sub) -> None:
    e = sub.add_parser("explain", help="print one target's explanation from a run")
    e.add_argument("--run", required=True, help="a run folder, or an output folder (follows LATEST)")
    target_arguments(e, "dataset for titles and features (default: the run's)")
    e.add_argument("--limit", type=int, default=10, help="rows shown per side and sign (pushing up, pushing down)")
    e.set_defaults(func=cmd_explain)
