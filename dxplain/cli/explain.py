"""``dxplain explain``: one target's explanation from a run (reads files only: no flow, no Prefect)."""

from __future__ import annotations

from .common import target_arguments


def print_explanation(run_path: str, user: str, item: str, dataset: str | None, limit: int) -> None:
    """Print one target's explanation from a run: its rows read by a filter on the run's files, titles and
    features from the dataset's user and item tables. The interactions are not read, so this costs the
    same at 50M interactions as at 100k (after a refresh, the CLI prints an example with it)."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    from ..datasets.registry import resolve_catalogue
    from ..errors import InputError
    from ..explain.report import format_explanation
    from ..io import runs
    from ..io.validation import index_of

    run = runs.resolve_run(run_path)
    dset = runs.open_run(run)
    summary = runs.read_manifest(run)["summary"]
    users, items = resolve_catalogue(dataset or summary["dataset"])
    key = {}
    for what, value, table in (("user", user, users), ("item", item, items)):
        if table is not None:  # an id the dataset does not have is named (the run cannot hold it either)
            index_of(pa.array([value]), table.column("id").combine_chunks(), what, f"--{what}")
        try:
            key[what] = pa.array([value]).cast(dset.schema.field(what).type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(
                f"--{what} {value}: the run's {what} ids are {dset.schema.field(what).type}; give one of them"
            ) from exc
    rows = dset.to_table(
        filter=(pads.field("user") == key["user"][0].as_py()) & (pads.field("item") == key["item"][0].as_py())
    )
    if rows.num_rows == 0:
        raise InputError(
            f"--user {user} --item {item}: not explained in {run}; a run explains each user's "
            "top-N recommendations (items the user has not rated) or the --targets it was given: "
            "pick one of them (`dxplain report` lists them), or refresh with --targets"
        )
    loss, kind = summary.get("loss", "squared"), summary.get("model_kind")
    print(format_explanation(rows, items, users, limit=limit, loss=loss, model_kind=kind))


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
