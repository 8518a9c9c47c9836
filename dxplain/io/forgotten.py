"""The forgotten ids of an output folder, ``<out>/forgotten.parquet`` (kind: user|item, id: string), and the
published runs that still hold them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..forgotten import Forgotten, as_strings
from .atomic import Location, atomic_file, exists, join
from .runs import open_run
from .tables import read_parquet

FORGOTTEN = "forgotten.parquet"


def read_forgotten(out: Location) -> Forgotten:
    """What ``dxplain forget`` recorded in ``out`` (nothing if it never ran there)."""
    loc = join(out, FORGOTTEN)
    if not exists(loc):
        return Forgotten.none()
    t = read_parquet(loc)
    return Forgotten.of(*(t.filter(pc.equal(t["kind"], kind))["id"] for kind in ("user", "item")))


def write_forgotten(out: Location, f: Forgotten) -> None:
    kinds = ["user"] * len(f.users) + ["item"] * len(f.items)
    with atomic_file(join(out, FORGOTTEN)) as fh:
        pq.write_table(pa.table({"kind": kinds, "id": pa.concat_arrays([f.users, f.items])}), fh)


def runs_holding(out: Location, f: Forgotten, run_ids: list[str]) -> list[str]:
    """The runs (of ``run_ids``) with a row that names a forgotten id as target or training row."""
    holding = []
    for run_id in run_ids:
        dset = open_run(join(out, "runs", run_id))
        for side, columns in (("user", ("user", "train_user")), ("item", ("item", "train_item"))):
            ids = f.users if side == "user" else f.items
            if not len(ids):
                continue
            typed = _as_type(ids, dset.schema.field(side).type)
            if typed is None:
                continue
            hit = dset.to_table(columns=[columns[0]], filter=pads.field(columns[0]).isin(typed)).num_rows
            hit = hit or dset.to_table(columns=[columns[1]], filter=pads.field(columns[1]).isin(typed)).num_rows
            if hit:
                holding.append(run_id)
                break
    return holding


def _as_type(ids: pa.Array, t: pa.DataType) -> pa.Array | None:
    """Forgotten ids cast to a run's id type (None when none of them can be of it: "abc" and integer ids)."""
    t = t.value_type if pa.types.is_dictionary(t) else t
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ids.cast(t)
    ok = [x for x in ids.to_pylist() if x.lstrip("-").isdigit()]
    return pa.array([int(x) for x in ok]).cast(t) if ok else None


__all__ = ["FORGOTTEN", "read_forgotten", "write_forgotten", "runs_holding", "as_strings"]
