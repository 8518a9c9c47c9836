"""``dxplain report``: one self-contained HTML page of a refresh run or of a result folder.

It reads files and renders; it starts no Prefect server and no cluster.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ..params import Interval, validate

CONSTRAINTS = {"users": Interval(int, 1, example=200), "reasons": Interval(int, 1, example=3)}


def labels(dataset: str | None):
    """Titles, genres and user features from the run's dataset, or none when it is not at hand (the page
    then shows ids)."""
    from ..datasets import resolve_dataset
    from ..errors import DxplainError
    from ..reporting.pages import Labels

    if not dataset:
        return Labels()
    try:
        ds = resolve_dataset(dataset, fetch=False)
    except (DxplainError, OSError):
        return Labels()
    return Labels.from_tables(ds.items, ds.users)


def run_report(run, a) -> str:
    from ..io import report as io_report
    from ..io import runs
    from ..reporting.aggregate import SCAN_COLUMNS, recommendations, scan_rows
    from ..reporting.pages import run_page

    manifest = runs.read_manifest(run)
    summary = manifest.get("summary", {})
    rows = scan_rows(io_report.run_batches(run, SCAN_COLUMNS))
    users = rows.users()
    shown = users[: a.users]
    recs = recommendations(io_report.run_rows_of_users(run, shown), a.reasons)
    return run_page(
        PurePosixPath(str(run)).name,
        summary,
        manifest.get("shards", []),
        rows,
        recs,
        len(users),
        labels(a.dataset or summary.get("dataset")),
        a.reasons,
        runs.read_meta_table(run, runs.CHANGES),
    )


def results_report(folder, name: str) -> str:
    from ..io.report import read_result_folder
    from ..reporting.pages import results_page

    f = read_result_folder(folder)
    return results_page(name, f.summary, f.images, f.texts, f.tables)


def cmd_report(a) -> int:
    from ..errors import InputError
    from ..io import report as io_report
    from ..io import runs

    validate(CONSTRAINTS, vars(a))
    source = a.run.rstrip("/")
    results = io_report.summary_file(source) is not None
    if results:
        run, name = source, PurePosixPath(source).name
    else:
        try:
            run = runs.resolve_run(source)
        except InputError as exc:
            raise InputError(
                f"{exc}; or a result folder of evaluate, negatives, prototypes or gammli fit (with "
                "summary.json or metrics.json)"
            ) from None
        name = PurePosixPath(str(run)).name
    out = a.out or str(Path.cwd() / f"report-{name}.html")
    io_report.check_page_out(out, a.force)  # before reading the run: refused at once
    text = results_report(run, name) if results else run_report(run, a)
    print(io_report.write_page(out, text, a.force))
    return 0


def register(sub) -> None:
    r = sub.add_parser("report", help="write one self-contained HTML page of a run or a result folder")
    r.add_argument(
        "run",
        help="a run folder, an output folder (follows LATEST), or a result folder of evaluate, "
        "negatives, prototypes or gammli fit",
    )
    r.add_argument("--out", help="the page to write (default report-<folder name>.html here)")
    r.add_argument("--force", action="store_true", help="replace an existing --out")
    r.add_argument("--users", type=int, default=200, help="users listed, the first by id (default 200)")
    r.add_argument("--reasons", type=int, default=3, help="reasons shown per side and recommendation (default 3)")
    r.add_argument("--dataset", help="dataset for titles and features (default: the run's, if at hand)")
    r.set_defaults(func=cmd_report)
