"""Id vocabularies: the list of original ids a table is indexed by, and the lookup of ids in it.

A dataset's id lists are sorted without repeats, so a lookup is a binary search: the ids sorted, then
one search, O(ids·log) with nothing built from the vocabulary per lookup. Hashing the vocabulary
(``pc.index_in``) costs O(vocabulary) on every call, so a table read in chunks would pay
O(chunks × vocabulary), quadratic in the table. String ids are searched as fixed-width byte keys,
made once per ``Vocabulary`` object: a task that looks up many chunks against the same (broadcast)
vocabulary makes them once.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError
from .kernels.lookup import find_sorted

UNKNOWN_IDS = (
    "{n} row(s) name {what}(s) unknown to the dataset, e.g. {examples}; "
    "use ids that appear in the training interactions"
)
# Ids per hash table when a few ids are looked up in a large vocabulary that cannot be searched: hashing
# a whole vocabulary of millions of string ids takes several times its size.
VALUE_SET_CHUNK = 1 << 20


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _strictly_increasing(keys: np.ndarray) -> bool:
    return len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1]))


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


def _hashed(ids: pa.Array, vocabulary: pa.Array) -> np.ndarray:
    """Each id's position in ``vocabulary`` (−1 if absent) by hashing; a few ids against a large
    vocabulary are looked up a slice of it (``VALUE_SET_CHUNK`` ids) at a time."""
    if len(vocabulary) <= VALUE_SET_CHUNK or len(ids) >= len(vocabulary):
        return pc.fill_null(pc.index_in(ids, value_set=vocabulary), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.full(len(ids), -1, np.int64)
    for a in range(0, len(vocabulary), VALUE_SET_CHUNK):
        at = pc.fill_null(pc.index_in(ids, value_set=vocabulary.slice(a, VALUE_SET_CHUNK)), -1)
        at = at.to_numpy(zero_copy_only=False)
        out[at >= 0] = a + at[at >= 0]
    return out


class Vocabulary:
    """The original ids (``ids``, a pyarrow array) that indices 0..n-1 stand for, and the lookup of ids in
    them. Pickled it is its ids alone: the search keys are made again where they are used."""

    def __init__(self, ids: pa.Array):
        self.ids = ids

    def __reduce__(self):
        return Vocabulary, (self.ids,)

    def __len__(self) -> int:
        return len(self.ids)

    def __sizeof__(self) -> int:  # what Dask budgets for it: its ids (the keys are made on the worker)
        return object.__sizeof__(self) + self.ids.nbytes

    @cached_property
    def search_keys(self) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(sorted keys, byte lengths or None) to search: integer ids as they are, string ids as fixed-width
        bytes with their lengths; None if the ids are of another type, hold a null or are not strictly
        increasing (then ids are hashed)."""
        ids = self.ids
        if ids.null_count or not len(ids):
            return None
        if pa.types.is_integer(ids.type):
            keys, lengths = ids.to_numpy(), None
        elif _is_string(ids.type):
            keys, lengths = _fixed_width(ids)
        else:
            return None
        return (keys, lengths) if _strictly_increasing(keys) else None

    def searched(self, ids: pa.Array) -> np.ndarray | None:
        """``positions`` by binary search, or None when ``search_keys`` is None or ``ids`` hold a null."""
        if ids.null_count or self.search_keys is None:
            return None
        keys, lengths = self.search_keys
        if lengths is None:
            if not pa.types.is_integer(ids.type):
                return None
            pos, hit = find_sorted(keys, ids.to_numpy())
            return np.where(hit, pos, -1)
        wanted, wanted_lengths = _fixed_width(ids)
        fits = wanted_lengths <= keys.dtype.itemsize  # a longer id is in no fixed-width key
        wanted = np.where(fits, wanted.astype(keys.dtype), keys[0])
        pos, hit = find_sorted(keys, wanted)
        hit &= fits & (lengths[pos] == wanted_lengths)  # fixed-width keys compare equal up to trailing NULs
        return np.where(hit, pos, -1)

    def positions(self, ids: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Each id's position in the vocabulary (−1 if absent), int64; ``ids`` of the vocabulary's type."""
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        found = self.searched(ids)
        return _hashed(ids, self.ids) if found is None else found

    def cast(self, ids: pa.ChunkedArray | pa.Array, what: str, source: str):
        """``ids`` as the vocabulary's type; ids that cannot be cast are an ``InputError`` naming both types."""
        if self.ids.type.equals(ids.type):
            return ids
        try:
            return ids.cast(self.ids.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(
                f"{source}: {what} ids of type {ids.type} do not match the dataset's {self.ids.type}"
            ) from exc

    def index_of(
        self, ids: pa.ChunkedArray | pa.Array, what: str, source: str, missing: str = UNKNOWN_IDS
    ) -> np.ndarray:
        """Indices (int32) of original ``ids``; ids not in the vocabulary are an ``InputError`` naming
        them, worded by ``missing`` (``{n}``, ``{what}``, ``{examples}``)."""
        ids = self.cast(ids, what, source)
        idx = self.positions(ids)
        unknown = idx < 0
        if unknown.any():
            examples = pc.unique(pc.filter(ids, pa.array(unknown))).to_pylist()[:5]
            raise InputError(f"{source}: " + missing.format(n=int(unknown.sum()), what=what, examples=examples))
        return idx.astype(np.int32)
