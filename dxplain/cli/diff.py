"""``dxplain diff``: what changed in the recommendations between two published runs, and why an item entered.

It reads files only (the two runs, and the earlier run's part store to mark training rows that are new): no flow,
no Prefect, no cluster.
"""

from __future__ import annotations

from ..params import Interval, validate

CONSTRAINTS = {"reasons": Interval(int, 1, example=3), "users": Interval(int, 1, example=20)}


def _ids(value: str, run_type, what: str):
    import pyarrow as pa

    from ..errors import InputError

    try:
        return pa.array([value]).cast(run_type.value_type if pa.types.is_dictionary(run_type) else run_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"--user {value}: the runs' {what} ids are {run_type}; give one of them") from exc


def choose_runs(out: str, from_id: str | None, to_id: str | None) -> tuple[str, str]:
    """(from, to) run ids: ``to`` defaults to LATEST's run, ``from`` to the newest published run before ``to``."""
    from ..errors import InputError
    from ..io.run_lookup import published_runs

    listed = [r["id"] for r in published_runs(out)]  # newest first
    if not listed:
        raise InputError(f"--out {out}: no published run; run `dxplain refresh --out {out}` first")
    for flag, run_id in (("--from", from_id), ("--to", to_id)):
        if run_id is not None and run_id not in listed:
            raise InputError(f"{flag} {run_id}: not a published run of {out}; its runs: {', '.join(listed[:5])}")
    to_id = to_id or next((r["id"] for r in published_runs(out) if r["latest"]), listed[0])
    if from_id is None:
        older = [r for r in listed if r < to_id]
        if not older:
            raise InputError(
                f"--out {out}: {to_id} is its oldest published run: nothing to compare it with; give --from and --to"
            )
        from_id = older[0]
    if from_id == to_id:
        raise InputError(f"--from and --to both name {to_id}: give two different runs")
    return from_id, to_id


def run_targets(run, users):
    """A run's targets (of ``users`` only, when given): its targets file, or one scan of its rows for a run written
    before them (which also gives each target's prediction)."""
    import pyarrow.compute as pc

    from ..io import runs
    from ..io.run_lookup import run_rows
    from ..reporting import diff

    t = runs.read_meta_table(run, runs.TARGETS)
    if t is None:
        return diff.targets(run_rows(run, diff.TARGET_COLUMNS, users))
    return t if users is None else t.filter(pc.is_in(t["user"], value_set=users))


def compute(out: str, from_id: str, to_id: str, user: str | None, per_target: int):
    """(changes with reasons, number of users compared, whether the earlier run's training rows were at hand)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..io.partitions import holds_pairs
    from ..io.run_lookup import run_folder, run_rows, training_store
    from ..io.runs import open_run
    from ..reporting import diff

    run_from, run_to = run_folder(out, from_id), run_folder(out, to_id)
    users = None if user is None else _ids(user, open_run(run_to).schema.field("user").type, "user")
    before, after = (run_targets(run, users) for run in (run_from, run_to))
    changed = diff.changes(before, after)
    entered = changed.filter(pc.equal(changed["change"], "entered"))
    entered_users = pc.unique(entered["user"]) if entered.num_rows else pa.array([], after["user"].type)
    top = diff.reasons(run_rows(run_to, diff.REASON_COLUMNS, entered_users), entered, per_target)
    store = training_store(run_from)
    new = None
    if store is not None and top.num_rows:
        new = ~holds_pairs(store, top["train_user"].combine_chunks(), top["train_item"].combine_chunks())
    users_both = pa.chunked_array([*before["user"].chunks, *after["user"].cast(before["user"].type).chunks])
    compared = pc.count_distinct(users_both).as_py()  # in Arrow: a 50M run has 500k users
    return diff.with_reasons(changed, top, new), compared, store is not None


def print_changes(table, compared: int, from_id: str, to_id: str, users_shown: int, had_store: bool) -> None:
    import pyarrow.compute as pc

    changed_users = pc.unique(table["user"]).to_pylist()
    n_in = int(pc.sum(pc.equal(table["change"], "entered")).as_py() or 0)
    print(
        f"{from_id} → {to_id}: {len(changed_users)} of {compared} users' recommendations changed; "
        f"{n_in} entered, {table.num_rows - n_in} left"
    )
    if not had_store:
        print(f"(the part store of {from_id} is gone: whether a training row is new is unknown)")
    rows = table.to_pylist()
    for user in changed_users[:users_shown]:
        print(f"\nuser {user}")
        for r in (r for r in rows if r["user"] == user):
            if r["change"] == "left":
                print(f"  - item {r['item']} (was rank {r['rank_from']})")
                continue
            predicted = "" if r["prediction_to"] is None else f", prediction {r['prediction_to']:.3g}"
            print(f"  + item {r['item']} (rank {r['rank_to']}{predicted})")
            for why in r["reasons"]:
                who = "own" if why["side"] == "item" else "other user's"
                mark = " [new]" if why["new"] else ""
                print(
                    f"      {who} row ({why['train_user']}, {why['train_item']}) rating {why['rating']:g}: "
                    f"importance {why['importance']:+.3g}{mark}"
                )
    if len(changed_users) > users_shown:
        print(f"\n… and {len(changed_users) - users_shown} more users (--users N shows more; --parquet FILE has all)")


def cmd_diff(a) -> int:
    import pyarrow.parquet as pq

    from ..io.atomic import atomic_file

    validate(CONSTRAINTS, {"reasons": a.reasons, "users": a.users})
    from_id, to_id = choose_runs(a.out, a.from_run, a.to_run)
    table, compared, had_store = compute(a.out, from_id, to_id, a.user, a.reasons)
    if a.parquet:  # before the listing: a reader that stops early (`| head`) must not cost the file
        with atomic_file(a.parquet) as fh:
            pq.write_table(table, fh)
    print_changes(table, compared, from_id, to_id, a.users, had_store)
    if a.parquet:
        print(f"\nwrote {table.num_rows} changes to {a.parquet}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "diff",
        help="what changed in the recommendations between two runs (default: the run before LATEST → LATEST)",
    )
    p.add_argument("--out", required=True, help="the output folder of the refreshes")
    p.add_argument("--from", dest="from_run", help="the earlier run's id (default: the published run before --to)")
    p.add_argument("--to", dest="to_run", help="the later run's id (default: the run LATEST names)")
    p.add_argument("--user", help="only this user (original id)")
    p.add_argument(
        "--parquet",
        help="write every change: user, item, change (entered|left), rank_from, rank_to, prediction_from, "
        "prediction_to, reasons (an entered item's top training rows, each with new: not a training row before)",
    )
    p.add_argument("--reasons", type=int, default=3, help="training rows shown per entered item (default 3)")
    p.add_argument("--users", type=int, default=20, help="users printed at most (default 20)")
    p.set_defaults(func=cmd_diff)
