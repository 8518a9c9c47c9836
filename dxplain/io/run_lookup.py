"""Looking one user up in a published run without scanning it, and listing an output folder's runs.

A shard's rows are sorted by target, so a user's rows sit in one file and a few consecutive row groups. At write time
``write_user_index`` records, beside the shard's entry, which row groups hold each user
(``_meta/users-<shard>.parquet``: user, row_group); ``UserIndex`` reads those files once and ``rows`` then reads only
a user's row groups. A run written before the index existed is indexed by reading its ``user`` column once.

Run and user names come from requests (``dxplain serve``): ``published_runs`` lists the folders the out folder holds,
and a run is opened only by a name in that list, so no name from outside is ever joined into a path.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import Location, exists, filesystem, join, read_text
from .partitions import Partitions, open_store
from .runs import LATEST, TARGETS, index_name, manifest_path, meta, open_run, read_manifest


def published_runs(out: Location) -> list[dict]:
    """The complete runs under ``out``, newest first: id, whether LATEST names it, and its summary's headline."""
    fs, root = filesystem(join(out, "runs"))
    if not fs.exists(root):
        return []
    latest = read_text(join(out, LATEST)).strip() if exists(join(out, LATEST)) else None
    found = []
    for entry in fs.ls(root, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        run = join(out, "runs", name)
        if manifest_path(run) is None:
            continue  # interrupted or still running: never served
        summary = read_manifest(run)["summary"]
        found.append(
            {
                "id": name,
                "latest": name == latest,
                "dataset": summary.get("dataset"),
                "model_kind": summary.get("model_kind"),
                "targets": summary.get("targets"),
                "fidelity_ok": summary.get("fidelity_ok"),
            }
        )
    return sorted(found, key=lambda r: r["id"], reverse=True)


def run_rows(run: Location, columns: list[str], users: pa.Array | None = None) -> pa.Table:
    """The run's rows (those ``columns``), of ``users`` only when given (a filter on the files: row groups of
    other users are skipped by their statistics)."""
    import pyarrow.dataset as pads

    return open_run(run).to_table(columns=columns, filter=None if users is None else pads.field("user").isin(users))


def training_store(run: Location) -> Partitions | None:
    """The part store the run was explained over (the first store its ``_meta/stores.json`` records), or None
    when the run recorded none or the store was pruned since."""
    if not exists(meta(run, "stores.json")):
        return None
    stores = json.loads(read_text(meta(run, "stores.json")))
    return open_store(stores[0]) if stores else None


def run_folder(out: Location, run_id: str) -> Location:
    """The folder of a published run named by ``run_id`` ("latest" follows LATEST); InputError for any other name."""
    runs = published_runs(out)
    if run_id == "latest":
        latest = [r["id"] for r in runs if r["latest"]]
        if not latest:
            raise InputError(f"{out}: no published run yet (LATEST is missing)")
        run_id = latest[0]
    if run_id not in {r["id"] for r in runs}:
        raise InputError(f"run {run_id!r}: not a published run of this folder (GET /api/runs lists them)")
    return join(out, "runs", run_id)


class UserIndex:
    """Which files and row groups hold each user's rows in one run."""

    def __init__(self, run: Location):
        self.run = run
        self.files = [s["file"] for s in read_manifest(run)["shards"]]
        tables = []
        for shard, name in enumerate(self.files):
            part = self._indexed(shard) if exists(join(run, index_name(shard))) else self._scanned(name)
            tables.append(part.append_column("file", pa.array(np.full(part.num_rows, shard, np.int32))))
        self.table = pa.concat_tables(tables) if tables else None
        self.user_type = None if self.table is None else self.table.schema.field("user").type
        self._ids = None

    def ids(self) -> list[str]:
        """The run's user ids as text, sorted; computed on first use (a search asks at every keystroke)."""
        if self._ids is None:
            self._ids = (
                [] if self.table is None else sorted(pc.unique(self.table.column("user")).cast(pa.string()).to_pylist())
            )
        return self._ids

    def _indexed(self, shard: int) -> pa.Table:
        fs, path = filesystem(join(self.run, index_name(shard)))
        with fs.open(path, "rb") as fh:
            return pq.read_table(fh)

    def _scanned(self, name: str) -> pa.Table:
        fs, path = filesystem(join(self.run, name))
        with fs.open(path, "rb") as fh:
            f = pq.ParquetFile(fh)
            parts = []
            for g in range(f.metadata.num_row_groups):
                present = pc.unique(f.read_row_group(g, columns=["user"]).column("user").combine_chunks())
                parts.append(pa.table({"user": present, "row_group": np.full(len(present), g, np.int32)}))
        return pa.concat_tables(parts) if parts else pa.table({"user": [], "row_group": pa.array([], pa.int32())})

    def key(self, user: str):
        """``user`` (a request's text) as the run's user id type, or None if it cannot be one."""
        if self.user_type is None:
            return None
        try:
            return pa.scalar(user).cast(self.user_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    def rows(self, user: str) -> pa.Table | None:
        """Every row the run kept for ``user``'s targets, in the written order; None if the run has none."""
        key = self.key(user)
        if key is None:
            return None
        hits = self.table.filter(pc.equal(self.table.column("user"), key))
        if hits.num_rows == 0:
            return None
        tables = []
        for shard in np.unique(hits.column("file").to_numpy()):
            groups = np.sort(hits.filter(pc.equal(hits.column("file"), int(shard))).column("row_group").to_numpy())
            fs, path = filesystem(join(self.run, self.files[int(shard)]))
            with fs.open(path, "rb") as fh:
                t = pq.ParquetFile(fh).read_row_groups([int(g) for g in groups])
            tables.append(t.filter(pc.equal(t.column("user"), key)))
        return pa.concat_tables(tables)


def previous_run(out: Location, run_id: str) -> str | None:
    """The published run that ``run_id`` (a published run's id) is compared with: the one its summary's ``changes``
    names when that run is still published, else the newest published run older than it; None for the first."""
    listed = [r["id"] for r in published_runs(out)]
    recorded = (summary_of(join(out, "runs", run_id)).get("changes") or {}).get("from")
    if recorded in listed:
        return recorded
    older = [r for r in listed if r < run_id]
    return older[0] if older else None


def targets_where(run: Location, column: str, key: pa.Scalar) -> pa.Table | None:
    """The run's targets (user, item, rec_rank) whose ``column`` ("user" or "item") equals ``key``: from its targets
    file, or, for a run written before targets files, from its rows (a scan of that column). None when the key's type
    cannot be the run's."""
    loc = meta(run, TARGETS)
    if exists(loc):
        fs, path = filesystem(loc)
        with fs.open(path, "rb") as fh:
            f = pq.ParquetFile(fh)
            try:
                key = key.cast(f.schema_arrow.field(column).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            return pq.read_table(fh, filters=[(column, "=", key.as_py())])
    dset = open_run(run)
    try:
        key = key.cast(dset.schema.field(column).type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    import pyarrow.dataset as pads

    rows = dset.to_table(columns=["user", "item", "rec_rank"], filter=pads.field(column) == key.as_py())
    return rows.group_by(["user", "item"]).aggregate([("rec_rank", "min")]).rename_columns(["user", "item", "rec_rank"])


class Catalogue:
    """A dataset's user and item tables (``read_catalogue``: titles, features) for looking ids up by id or by text.

    Ids are found by binary search over a sorted copy (a lookup names a few hundred ids among millions)."""

    def __init__(self, users: pa.Table | None, items: pa.Table | None):
        self.tables = {"user": users, "item": items}
        self.sorted = {}
        for side, table in self.tables.items():
            if table is not None:
                ids = table.column("id").combine_chunks().to_numpy(zero_copy_only=False)
                order = np.argsort(ids, kind="stable")
                self.sorted[side] = (ids[order], order)

    def info(self, side: str, ids: list) -> list[dict | None]:
        """Each id's row of the side's table without its id (JSON-safe), or None for an id the table lacks."""
        table = self.tables.get(side)
        if table is None or table.num_columns < 2 or not ids:  # no table, or ids only: nothing to tell
            return [None] * len(ids)
        keys, order = self.sorted[side]
        try:
            want = np.asarray(ids, dtype=keys.dtype)
        except (TypeError, ValueError):
            return [None] * len(ids)
        pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        hit = keys[pos] == want
        rows = table.drop_columns(["id"]).take(pa.array(order[pos])).to_pylist()
        return [r if h else None for r, h in zip(rows, hit)]

    def search(self, side: str, text: str, limit: int = 20) -> list[dict]:
        """Up to ``limit`` rows of the side's table whose id starts with ``text`` or whose title or name contains it
        (case-insensitive), ids first; each {"id", **its columns}."""
        table = self.tables.get(side)
        if table is None or not text:
            return []
        found = pc.starts_with(table.column("id").cast(pa.string()), text)
        for column in NAME_COLUMNS:
            if column in table.column_names and pa.types.is_string(table.schema.field(column).type):
                found = pc.or_(
                    found, pc.fill_null(pc.match_substring(table.column(column), text, ignore_case=True), False)
                )
        hits = table.filter(found)
        return hits.slice(0, limit).to_pylist()


NAME_COLUMNS = ("title", "name")  # the text columns a search looks into


def summary_of(run: Location) -> dict:
    """The run's summary as its manifest records it (JSON-safe)."""
    return json.loads(json.dumps(read_manifest(run)["summary"], default=str))
