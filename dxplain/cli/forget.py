"""``dxplain forget``: remove people (or items) from every later refresh into an output folder.

The ids join ``<out>/forgotten.parquet`` under the folder's lock (``io.lock``); every later refresh (and every flow
that loads its interactions with that ``--out``) drops their rows at load, whatever the dataset still holds, and
trains afresh on what is left: the data's fingerprint changes, so no model or part store that saw their rows is
reused. Published runs that still name them are listed, for deletion (``refresh --keep N``, or by hand).
"""

from __future__ import annotations

from ..params import Interval, validate

CONSTRAINTS = {"lock_wait": Interval(float, 0, example=600)}


def id_list(value: str | None, flag: str) -> list[str]:
    from ..errors import InputError

    if value is None:
        return []
    ids = [x.strip() for x in value.split(",")]
    if not all(ids):
        raise InputError(f"{flag} {value!r}: an empty id in the list; give ids separated by commas, e.g. {flag} 17,42")
    return ids


def cmd_forget(a) -> int:
    import logging

    from ..errors import InputError
    from ..forgotten import Forgotten
    from ..io.forgotten import FORGOTTEN, read_forgotten, runs_holding, write_forgotten
    from ..io.lock import out_lock
    from ..io.run_lookup import published_runs

    validate(CONSTRAINTS, {"lock_wait": a.lock_wait})
    users, items = id_list(a.users, "--users"), id_list(a.items, "--items")
    if not users and not items:
        raise InputError("nothing to forget: give --users ID[,ID...] and/or --items ID[,ID...]")
    with out_lock(a.out, a.lock_wait, "forget", logging.getLogger("dxplain.forget")):
        before = read_forgotten(a.out)
        after = before.union(Forgotten.of(users, items))
        write_forgotten(a.out, after)
    added = (len(after.users) - len(before.users), len(after.items) - len(before.items))
    print(
        f"{a.out}/{FORGOTTEN}: {added[0]} user(s) and {added[1]} item(s) added "
        f"({len(after.users)} and {len(after.items)} forgotten in all); every later refresh into {a.out} "
        "drops their rows at load and trains afresh without them"
    )
    holding = runs_holding(a.out, Forgotten.of(users, items), [r["id"] for r in published_runs(a.out)])
    if holding:
        print(f"published runs that still name them ({len(holding)}; delete them, or refresh with --keep N):")
        for run in holding:
            print(f"  {a.out}/runs/{run}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("forget", help="drop users' (or items') rows from every later refresh into an output folder")
    p.add_argument("--out", required=True, help="the output folder the refreshes publish into")
    p.add_argument("--users", help="user ids, comma-separated")
    p.add_argument("--items", help="item ids, comma-separated")
    p.add_argument(
        "--lock-wait",
        type=float,
        default=3600.0,
        help="seconds to wait for a refresh of the same --out to finish (default 3600; 0 = refuse at once)",
    )
    p.set_defaults(func=cmd_forget)
