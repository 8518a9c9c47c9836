"""Read, validate and write interaction tables (Parquet, CSV) and prepared datasets.

A *prepared dataset* is a folder::

    interactions.parquet   user, item, rating[, timestamp] with the original ids (file or folder of parts)
    users.parquet          column ``id`` in index order (+ optional user features)
    items.parquet          column ``id`` in index order (+ optional item features: title, year, genres)

Validation happens here, where data enters: wrong columns, empty tables, NaN or infinite
ratings, duplicate (user, item) pairs and null ids are rejected with a message naming the
problem and the fix. Nothing is written unless the whole input passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import InputError
from ..interactions import Interactions, Targets
from ..kernels.lookup import find_sorted
from .atomic import Location, atomic_file, atomic_path, filesystem, is_local, join

REQUIRED = ("user", "item", "rating")


@dataclass(frozen=True)
class Dataset:
    """Interactions plus the user and item tables (ids in index order, optional features)."""

    interactions: Interactions
    users: pa.Table
    items: pa.Table
    name: str = "dataset"


def _arrow_fs(fs):
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    return PyFileSystem(FSSpecHandler(fs))


def read_table(path: Location, columns: dict[str, str] | None = None, delimiter: str | None = None) -> pa.Table:
    """Read a Parquet file/folder or a delimited text file, renaming columns by ``columns``.

    ``columns`` maps dxplain's names to the file's, e.g. ``{"user": "reviewerID", "item": "asin"}``.
    """
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{path}: no such file or folder; check the path")
    # Local files go to pyarrow by path (its own multi-threaded readers); URLs through fsspec.
    arrow_fs = None if is_local(path) else _arrow_fs(fs)
    try:
        if fs.isdir(p) or PurePosixPath(p).suffix in (".parquet", ".pq"):
            table = pq.read_table(p, filesystem=arrow_fs)
        else:
            if fs.size(p) == 0:
                raise InputError(f"{path}: the file is empty; it needs a header and at least one interaction")
            suffix = PurePosixPath(p).suffix
            delim = delimiter or ("\t" if suffix in (".tsv", ".inter", ".data") else ",")
            # Only empty cells are missing: "nan"/"inf" must reach the rating check as numbers.
            table = pacsv.read_csv(
                p if arrow_fs is None else arrow_fs.open_input_stream(p),
                parse_options=pacsv.ParseOptions(delimiter=delim),
                convert_options=pacsv.ConvertOptions(null_values=[""]),
            )
    except InputError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(
            f"{path}: cannot be read as a table ({exc}); give a Parquet file or a CSV with a header"
        ) from exc
    if columns:
        missing = [src for src in columns.values() if src not in table.column_names]
        if missing:
            raise InputError(
                f"{path}: column mapping names {missing}, which the file lacks; its columns are {table.column_names}"
            )
        rename = {src: dst for dst, src in columns.items()}
        table = table.rename_columns([rename.get(c, c) for c in table.column_names])
    return table


# Words that name a column's role in common exports (RecBole's user_id:token, Amazon's reviewerID/asin/overall).
_ROLE_WORDS = {
    "user": ("user", "reviewer", "customer"),
    "item": ("item", "asin", "movie", "product", "book"),
    "rating": ("rating", "overall", "score", "stars"),
}


def suggest_columns(names: list[str]) -> str:
    """A ``--columns`` mapping for a file's column names: each role's first column whose name holds one of
    its words (case-insensitive), else Amazon's names as the example."""
    guess = {}
    for role, words in _ROLE_WORDS.items():
        found = [n for n in names if n not in guess.values() and any(w in n.lower() for w in words)]
        guess[role] = found[0] if found else None
    if None in guess.values():
        guess = {"user": "reviewerID", "item": "asin", "rating": "overall"}
    return ",".join(f"{role}={name}" for role, name in guess.items())


def _check_schema(schema: pa.Schema, rows: int, source: str) -> None:
    missing = [c for c in REQUIRED if c not in schema.names]
    if missing:
        raise InputError(
            f"{source}: missing column(s) {missing}; found {schema.names}. Rename them, or "
            "import the file with a mapping: dxplain datasets import FILE --out DIR "
            f"--columns {suggest_columns(schema.names)}"
        )
    if rows == 0:
        raise InputError(f"{source}: the table has no rows; it needs at least one interaction")
    for c in ("user", "item"):
        t = schema.field(c).type
        if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise InputError(f"{source}: column {c!r} has type {t}; ids must be integers or strings")


def _check_columns(table: pa.Table, source: str) -> None:
    _check_schema(table.schema, table.num_rows, source)
    for c in ("user", "item"):
        nulls = table.column(c).null_count
        if nulls:
            raise InputError(f"{source}: {nulls} row(s) have no {c} id; drop or fill them")


def _ratings(table: pa.Table, source: str) -> np.ndarray:
    col = table.column("rating")
    if pa.types.is_null(col.type):
        raise InputError(f"{source}: every rating is missing; the rating column must hold numbers")
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise InputError(f"{source}: column 'rating' has type {col.type}; ratings must be numbers")
    if col.null_count:
        raise InputError(f"{source}: {col.null_count} rating(s) are missing; drop or fill them")
    y = col.to_numpy().astype(np.float64)
    bad = ~np.isfinite(y)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{source}: {int(bad.sum())} rating(s) are NaN or infinite (first at row {first}: "
            f"user={table.column('user')[first].as_py()!r}, item={table.column('item')[first].as_py()!r}, "
            f"rating={y[first]}); drop or fix them"
        )
    return y


def check_interactions(path: Location, need_unrated: bool = False) -> None:
    """The checks a command runs on a dataset path before any flow starts: columns, types, rows, ratings
    (a prepared dataset's ratings and ids are checked by the tasks that scan it, as the flow starts).

    ``need_unrated``: also refuse data in which every user rated every item (a one-row file is the
    smallest case), where there is nothing to recommend. Duplicate pairs are left to the full load.
    """
    fs, p = filesystem(path)
    if fs.isdir(p) and all(fs.exists(f"{p}/{f}") for f in ("interactions.parquet", "users.parquet", "items.parquet")):
        # A prepared dataset: its footers only. Its rows are checked by the tasks that read them
        # (``partitions.scan_source``), so no command reads a large table whole just to check it.
        source = join(path, "interactions.parquet")
        schema, rows = _parquet_shape(source)
        _check_schema(schema, rows, str(source))
        if need_unrated:
            n_users, n_items = (_parquet_shape(join(path, f"{w}.parquet"))[1] for w in ("users", "items"))
            _check_unrated(rows, n_users, n_items, source)
        return
    source = join(path, "interactions.parquet") if fs.isdir(p) and fs.exists(f"{p}/interactions.parquet") else path
    table = read_table(source)
    _check_columns(table, str(source))
    _ratings(table, str(source))
    if need_unrated:
        _check_unrated(table.num_rows, *(pc.count_distinct(table.column(c)).as_py() for c in ("user", "item")), source)


def _check_unrated(rows: int, n_users: int, n_items: int, source) -> None:
    if rows >= n_users * n_items:
        raise InputError(
            f"{source}: its {n_users} user(s) rated all {n_items} item(s), so there is nothing "
            "to recommend and explain; give a dataset with unrated pairs, or --targets"
        )


def parquet_files(path: Location) -> list[str]:
    """The Parquet files of a file or folder (in name order), as paths of its filesystem: those
    ``pq.read_table`` reads, i.e. none under a name starting with ``_`` or ``.`` (``_temporary/``, ``.crc``)."""
    fs, p = filesystem(path)
    if not fs.isdir(p):
        return [p]
    root = p.rstrip("/")
    return sorted(
        f
        for f in fs.find(p)
        if f.endswith((".parquet", ".pq"))
        and not any(part.startswith(("_", ".")) for part in f[len(root) :].strip("/").split("/"))
    )


def _parquet_shape(path: Location) -> tuple[pa.Schema, int]:
    """The schema and row count of a Parquet file, or of a folder of them, from their footers."""
    fs, _ = filesystem(path)
    schema, rows = None, 0
    for f in parquet_files(path):
        with fs.open(f, "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        schema, rows = schema or meta.schema.to_arrow_schema(), rows + meta.num_rows
    if schema is None:
        raise InputError(f"{path}: holds no Parquet file; it needs the interactions")
    return schema, rows


def _sorted_unique(col: pa.ChunkedArray) -> pa.Array:
    uniq = pc.unique(col)
    return uniq.take(pc.sort_indices(uniq))


UNKNOWN_IDS = (
    "{n} row(s) name {what}(s) unknown to the dataset, e.g. {examples}; "
    "use ids that appear in the training interactions"
)


def index_of(
    ids: pa.ChunkedArray | pa.Array, vocabulary: pa.Array, what: str, source: str, missing: str = UNKNOWN_IDS
) -> np.ndarray:
    """Map original ids to indices in ``vocabulary``; ids not in it are an error naming them (``missing``)."""
    ids = _as_type_of(ids, vocabulary, what, source)
    idx = _index_in(ids, vocabulary)
    unknown = idx < 0
    if unknown.any():
        examples = pc.unique(pc.filter(ids, pa.array(unknown))).to_pylist()[:5]
        raise InputError(f"{source}: " + missing.format(n=int(unknown.sum()), what=what, examples=examples))
    return idx.astype(np.int32)


def _as_type_of(ids, vocabulary: pa.Array, what: str, source: str):
    if vocabulary.type.equals(ids.type):
        return ids
    try:
        return ids.cast(vocabulary.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(
            f"{source}: {what} ids of type {ids.type} do not match the dataset's {vocabulary.type}"
        ) from exc


VALUE_SET_CHUNK = 1 << 20  # ids per hash table when a few ids are looked up in a large vocabulary


def _index_in(ids, vocabulary: pa.Array) -> np.ndarray:
    """Each id's position in ``vocabulary`` (−1 if absent).

    A sorted vocabulary (a dataset's id lists are) is searched: the ids sorted, then one binary search,
    O(ids·log) and nothing built from the vocabulary per call. ``pc.index_in`` hashes its whole value set
    on every call, so a table read in chunks paid O(chunks × vocabulary), quadratic in the table: the
    partition stage's slope was 1.27 from 5M to 50M (4M of the 9.8M user ids: 2.1 s hashed, 0.64 s
    searched). Otherwise a few ids (targets, one user) against a large vocabulary are looked up a slice
    of it at a time: hashing 9.8M string ids took 620 MB of the flow's 1.5 GiB; a slice of 1M a tenth."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    found = _searched(ids, vocabulary)
    if found is not None:
        return found
    if len(vocabulary) <= VALUE_SET_CHUNK or len(ids) >= len(vocabulary):
        return pc.fill_null(pc.index_in(ids, value_set=vocabulary), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.full(len(ids), -1, np.int64)
    for a in range(0, len(vocabulary), VALUE_SET_CHUNK):
        at = pc.fill_null(pc.index_in(ids, value_set=vocabulary.slice(a, VALUE_SET_CHUNK)), -1)
        at = at.to_numpy(zero_copy_only=False)
        out[at >= 0] = a + at[at >= 0]
    return out


def _searched(ids: pa.Array, vocabulary: pa.Array) -> np.ndarray | None:
    """``_index_in`` by binary search when ``vocabulary`` is sorted without repeats and both are integers
    or strings without nulls; None otherwise."""
    if ids.null_count or vocabulary.null_count or not len(vocabulary):
        return None
    if pa.types.is_integer(vocabulary.type) and pa.types.is_integer(ids.type):
        keys, wanted, fits = vocabulary.to_numpy(), ids.to_numpy(), None
    elif pa.types.is_string(vocabulary.type) or pa.types.is_large_string(vocabulary.type):
        keys = _sorted_strings(vocabulary)
        if keys is None:
            return None
        keys, lengths = keys
        wanted, wanted_lengths = _fixed_width(ids)
        fits = wanted_lengths <= keys.dtype.itemsize  # a longer id is in no fixed-width key
        wanted = np.where(fits, wanted.astype(keys.dtype), keys[0])
    else:
        return None
    if fits is None and not (len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1]))):
        return None  # unsorted (strings were checked when their keys were made)
    pos, hit = find_sorted(keys, wanted)
    if fits is not None:  # fixed-width strings compare equal up to trailing NULs: the lengths must match too
        hit &= fits & (lengths[pos] == wanted_lengths)
    return np.where(hit, pos, -1)


_STRING_KEYS: dict[int, tuple] = {}  # id(vocabulary) → (vocabulary, keys or None): a worker's few id lists


def _sorted_strings(vocabulary: pa.Array):
    """(fixed-width keys, lengths) of a string vocabulary, made once per vocabulary object (the cache
    holds it, so its id is not reused), or None if it is not strictly sorted as fixed-width keys."""
    hit = _STRING_KEYS.get(id(vocabulary))
    if hit is None or hit[0] is not vocabulary:
        keys, lengths = _fixed_width(vocabulary)
        ok = len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1]))
        hit = (vocabulary, (keys, lengths) if ok else None)
        while len(_STRING_KEYS) >= 4:
            _STRING_KEYS.pop(next(iter(_STRING_KEYS)))
        _STRING_KEYS[id(vocabulary)] = hit
    return hit[1]


def _fixed_width(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(numpy 'S' array of the strings' UTF-8 bytes, byte lengths), copied from Arrow's buffers."""
    strings = strings.cast(pa.large_string()) if pa.types.is_string(strings.type) else strings
    n = len(strings)
    offsets = np.frombuffer(strings.buffers()[1], np.int64)[strings.offset : strings.offset + n + 1]
    data = np.frombuffer(strings.buffers()[2], np.uint8) if strings.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    width = max(1, int(lengths.max()) if n else 1)
    out = np.zeros((n, width), np.uint8)
    out[np.arange(width) < lengths[:, None]] = data[offsets[0] : offsets[-1]]  # row by row: the bytes in order
    return out.view(f"S{width}").ravel(), lengths


def interactions_from_table(table: pa.Table, source: str = "interactions") -> tuple[Interactions, pa.Array, pa.Array]:
    """Validate a (user, item, rating[, timestamp]) table and map ids to contiguous indices."""
    _check_columns(table, source)
    y = _ratings(table, source)
    user_ids = _sorted_unique(table.column("user"))
    item_ids = _sorted_unique(table.column("item"))
    u = index_of(table.column("user"), user_ids, "user", source)
    i = index_of(table.column("item"), item_ids, "item", source)
    key = u.astype(np.int64) * len(item_ids) + i
    order = np.argsort(key, kind="stable")
    key = key[order]  # sorted: the (user, item) order Interactions keeps, so no second sort below
    dup = np.flatnonzero(key[1:] == key[:-1])
    del key  # one |D|-sized temporary at a time: the load is the flow's largest peak (docs/scaling.md)
    if len(dup):
        row = int(order[dup[0]])
        raise InputError(
            f"{source}: {len(dup)} duplicate (user, item) pair(s), e.g. user="
            f"{table.column('user')[row].as_py()!r}, item={table.column('item')[row].as_py()!r}; "
            "keep one rating per pair (e.g. the latest) before importing"
        )
    ts = table.column("timestamp").to_numpy().astype(np.int64)[order] if "timestamp" in table.column_names else None
    inter = Interactions(u[order], i[order], y[order], user_ids, item_ids, ts)
    return inter, user_ids, item_ids


def _id_table(ids: pa.Array, features: pa.Table | None) -> pa.Table:
    base = pa.table({"id": ids})
    if features is None:
        return base
    # Features are keyed by id; align them to index order.
    pos = pc.index_in(ids, value_set=features.column("id").cast(ids.type))
    feats = features.drop_columns(["id"])
    aligned = feats.take(pos)
    for name in aligned.column_names:
        base = base.append_column(name, aligned.column(name))
    return base


def write_dataset(
    folder: str | Path,
    table: pa.Table,
    user_features: pa.Table | None = None,
    item_features: pa.Table | None = None,
    source: str = "interactions",
) -> Dataset:
    """Validate ``table`` and write a prepared dataset folder atomically."""
    inter, user_ids, item_ids = interactions_from_table(table, source)
    users = _id_table(user_ids, user_features)
    items = _id_table(item_ids, item_features)
    folder = Path(folder)
    with atomic_path(folder) as tmp:
        tmp.mkdir(parents=True)
        pq.write_table(
            table.select([c for c in (*REQUIRED, "timestamp") if c in table.column_names]), tmp / "interactions.parquet"
        )
        pq.write_table(users, tmp / "users.parquet")
        pq.write_table(items, tmp / "items.parquet")
    return Dataset(inter, users, items, folder.name)


def read_dataset(path: Location, columns: dict[str, str] | None = None) -> Dataset:
    """Load a prepared dataset folder, or a bare interactions file (Parquet/CSV); local or an fsspec URL."""
    fs, p = filesystem(path)
    name = PurePosixPath(p).name
    if fs.isdir(p) and fs.exists(f"{p}/interactions.parquet"):
        table = read_table(join(path, "interactions.parquet"), columns)
        inter, user_ids, item_ids = interactions_from_table(table, str(join(path, "interactions.parquet")))
        users = (
            read_table(join(path, "users.parquet")) if fs.exists(f"{p}/users.parquet") else pa.table({"id": user_ids})
        )
        items = (
            read_table(join(path, "items.parquet")) if fs.exists(f"{p}/items.parquet") else pa.table({"id": item_ids})
        )
        if not users.column("id").combine_chunks().equals(user_ids) or not items.column("id").combine_chunks().equals(
            item_ids
        ):
            raise InputError(
                f"{path}: users.parquet/items.parquet do not list the ids of interactions.parquet in "
                "sorted order; re-create the dataset with `dxplain datasets import`"
            )
        return Dataset(inter, users, items, name)
    table = read_table(path, columns)
    inter, user_ids, item_ids = interactions_from_table(table, str(path))
    return Dataset(inter, pa.table({"id": user_ids}), pa.table({"id": item_ids}), PurePosixPath(p).stem)


def read_catalogue(path: Location) -> tuple[pa.Table | None, pa.Table | None]:
    """The user and item tables of a prepared dataset folder (ids in sorted order, titles and features),
    without reading its interactions: what showing one explanation needs, O(users + items). A bare
    interactions file has none: (None, None)."""
    fs, p = filesystem(path)
    if not (fs.isdir(p) and fs.exists(f"{p}/interactions.parquet")):
        return None, None
    return tuple(
        read_table(join(path, f"{what}.parquet")) if fs.exists(f"{p}/{what}.parquet") else None
        for what in ("users", "items")
    )


def read_id_column(path: Location, fix: str = "") -> pa.Array:
    """The ``id`` column of a Parquet file (local or a URL) as one array, read without the file's other
    columns (titles and features can be most of a catalogue). ``ParquetFile.read`` gives the column as
    one chunk, taken as it is; should it give several, they are combined and the memory Arrow's allocator
    keeps for reuse is handed back (``pq.read_table`` read the 76 MB of users' ids at 50M Amazon-like
    interactions as 75 chunks, and the flow then kept about three times the ids' size)."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{path}: no such file; {fix or 'check the path'}")
    try:
        with fs.open(p, "rb") as fh:
            f = pq.ParquetFile(fh)
            if "id" not in f.schema_arrow.names:
                raise InputError(
                    f"{path}: needs a column 'id'; found {f.schema_arrow.names}" + (f"; {fix}" if fix else "")
                )
            col = f.read(columns=["id"]).column("id")
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: cannot be read as Parquet ({exc}); {fix or 'give a Parquet file'}") from exc
    ids = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    del col
    pa.default_memory_pool().release_unused()
    return ids


def read_catalogue_ids(folder: Location) -> tuple[pa.Array, pa.Array]:
    """The ids of a prepared dataset folder's users.parquet and items.parquet (``read_id_column``): what
    loading its interactions needs of the catalogue."""
    fix = "re-create the dataset with `dxplain datasets import`"
    return read_id_column(join(folder, "users.parquet"), fix), read_id_column(join(folder, "items.parquet"), fix)


def read_targets(path: Location, data: Interactions, skip_unseen: bool | None = None) -> tuple[Targets, int]:
    """A Parquet/CSV list of (user, item) to explain, in original ids, and how many pairs were skipped.
    Ids that ``data`` lacks are an error naming them, unless ``skip_unseen`` drops their pairs (a nightly
    list that names users or items newer than the training data); False: the error says --skip-unseen would,
    None: the command has no such option."""
    table = read_table(path)
    missing = [c for c in ("user", "item") if c not in table.column_names]
    if missing:
        raise InputError(
            f"{path}: a targets file needs columns user and item; missing {missing}, found {table.column_names}"
        )
    if table.num_rows == 0:
        raise InputError(f"{path}: the targets file has no rows; list at least one (user, item) pair")
    sides = (("user", data.user_ids), ("item", data.item_ids))
    skipped = 0
    if skip_unseen:  # each id looked up once; the pairs naming an unseen one dropped
        u, i = (
            _index_in(_as_type_of(table.column(side), vocabulary, side, str(path)), vocabulary)
            for side, vocabulary in sides
        )
        seen = (u >= 0) & (i >= 0)
        skipped, table = int((~seen).sum()), table.filter(pa.array(seen))
        if table.num_rows == 0:
            raise InputError(
                f"{path}: every target names a user or item the training data lacks, so nothing "
                "is left to explain; list pairs of its users and items"
            )
        u, i = u[seen].astype(np.int32), i[seen].astype(np.int32)
    else:
        found, problems = {}, []
        for side, vocabulary in sides:  # both sides' problems at once
            try:
                found[side] = index_of(table.column(side), vocabulary, side, str(path))
            except InputError as e:
                problems.append(str(e).removeprefix(f"{path}: "))
        if problems:
            hint = " (or pass --skip-unseen to drop their pairs)" if skip_unseen is False else ""
            raise InputError(f"{path}: " + "; and ".join(problems) + hint)
        u, i = found["user"], found["item"]
    key = u.astype(np.int64) * data.n_items + i
    if len(np.unique(key)) != len(key):
        raise InputError(f"{path}: the targets list repeats (user, item) pairs; list each pair once")
    rank = table.column("rec_rank").to_numpy() if "rec_rank" in table.column_names else None
    targets = Targets.from_pairs(u, i, rank)
    # Arrow's allocator keeps what it freed for reuse: 0.3 GB after 5M targets, which the flow's process
    # would carry through training. Hand it back.
    pa.default_memory_pool().release_unused()
    return targets, skipped


def read_negatives(path: str | Path, P: Interactions) -> tuple[np.ndarray, np.ndarray]:
    """A Parquet/CSV list of negative (user, item) pairs in original ids; unknown ids or positives are errors."""
    t, _ = read_targets(path, P)
    key = t.user.astype(np.int64) * P.n_items + t.item
    bad = np.isin(key, P.user.astype(np.int64) * P.n_items + P.item)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: ({P.user_ids[t.user[n]]}, {P.item_ids[t.item[n]]}) is a positive interaction, "
            f"not a negative ({int(bad.sum())} such pairs); remove positives from the negatives list"
        )
    order = np.argsort(key)
    return t.user[order].astype(np.int64), t.item[order].astype(np.int64)


def pairs_table(P: Interactions, u: np.ndarray, i: np.ndarray) -> pa.Table:
    return pa.table({"user": P.user_ids.take(pa.array(u)), "item": P.item_ids.take(pa.array(i))})


def clear_dataset(folder: Location) -> None:
    """Remove a Parquet dataset folder that tasks are about to write afresh: no file of an earlier,
    differently split run stays to be read with the new ones."""
    fs, path = filesystem(folder)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def write_pairs_part(
    folder: Location,
    p: int,
    user_ids: pa.Array,
    item_ids: pa.Array,
    u: np.ndarray,
    i: np.ndarray,
    rating: np.ndarray | None = None,
) -> None:
    """(user, item) pairs in original ids (and their ``rating``, when given) as ``<folder>/part-<p>.parquet``,
    one file of a Parquet dataset (written whole, then moved into place)."""
    columns = {"user": user_ids.take(pa.array(u)), "item": item_ids.take(pa.array(i))}
    table = pa.table(columns if rating is None else {**columns, "rating": np.asarray(rating, np.float64)})
    fs, path = filesystem(folder)
    fs.makedirs(path, exist_ok=True)
    with atomic_file(join(folder, f"part-{p:05d}.parquet")) as fh:
        pq.write_table(table, fh)
