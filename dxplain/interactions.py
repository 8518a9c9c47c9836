"""The in-memory interaction table: contiguous int32 indices, original ids, by-user and by-item views.

Interactions are kept sorted by (user, item), so the by-user view is just ``user_indptr`` over the
arrays themselves; the by-item view is a stable permutation ``item_order`` with ``item_indptr``.
Both views are built once, at construction, and shared by training, recommendation and explanation.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np
import pyarrow as pa
import scipy.sparse as sp


class IdSpaces:
    """``n_users`` and ``n_items`` from the id lists (``user_ids``, ``item_ids``) a table is indexed by."""

    user_ids: pa.Array
    item_ids: pa.Array

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)


@dataclass(frozen=True, eq=False)
class Interactions(IdSpaces):
    """Explicit-feedback interactions (u, i, y) indexed 0..n_users-1 and 0..n_items-1.

    Attributes
    ----------
    user, item : int32 arrays, sorted by (user, item), no duplicate pairs
    rating : float64 array of the observed ratings y
    user_ids, item_ids : pyarrow arrays mapping index -> original id (string or integer)
    timestamp : optional int64 array
    """

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    user_ids: pa.Array
    item_ids: pa.Array
    timestamp: np.ndarray | None = None

    def __post_init__(self):
        # Kernels rely on the sort order; make it an invariant rather than a convention.
        key = self.user.astype(np.int64) * max(1, self.n_items) + self.item
        if len(key) > 1 and not np.all(key[1:] > key[:-1]):
            raise ValueError(
                "Interactions must be sorted by (user, item) without duplicates; "
                "build them with Interactions.from_indices"
            )

    @classmethod
    def from_indices(cls, user, item, rating, user_ids, item_ids, timestamp=None) -> Interactions:
        """Sort by (user, item) and build the views. Duplicates must have been rejected before."""
        user = np.asarray(user, dtype=np.int32)
        item = np.asarray(item, dtype=np.int32)
        order = np.lexsort((item, user))
        ts = None if timestamp is None else np.asarray(timestamp, dtype=np.int64)[order]
        return cls(user[order], item[order], np.asarray(rating, dtype=np.float64)[order], user_ids, item_ids, ts)

    def __len__(self) -> int:
        return len(self.user)

    @cached_property
    def user_indptr(self) -> np.ndarray:
        """Interactions of user u are positions user_indptr[u]:user_indptr[u+1]."""
        return np.searchsorted(self.user, np.arange(self.n_users + 1)).astype(np.int64)

    @cached_property
    def item_order(self) -> np.ndarray:
        """Positions of the interactions sorted by item (stable, so users stay sorted within an item)."""
        return stable_id_order(self.item)

    @cached_property
    def item_indptr(self) -> np.ndarray:
        """Interactions of item j are positions item_order[item_indptr[j]:item_indptr[j+1]]."""
        return np.searchsorted(self.item[self.item_order], np.arange(self.n_items + 1)).astype(np.int64)

    def user_positions(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the given users' interactions, concatenated, and the pointer per user."""
        return segment_positions(self.user_indptr, users)

    def item_positions(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions (in data order) of the given items' interactions, concatenated, and the pointer per item."""
        pos, ptr = segment_positions(self.item_indptr, items)
        return self.item_order[pos], ptr

    def user_degree(self) -> np.ndarray:
        return np.diff(self.user_indptr)

    def item_degree(self) -> np.ndarray:
        return np.diff(self.item_indptr)

    def by_user(self, values: np.ndarray | None = None) -> sp.csr_array:
        """Sparse users x items view (CSR) holding ``values`` (default: ratings) — never densified."""
        data = self.rating if values is None else values
        return sp.csr_array((data, self.item, self.user_indptr), shape=(self.n_users, self.n_items))

    def by_item(self, values: np.ndarray | None = None) -> sp.csr_array:
        """Sparse items x users view (CSR over the by-item order) holding ``values`` given in data order."""
        data = (self.rating if values is None else values)[self.item_order]
        return sp.csr_array((data, self.user[self.item_order], self.item_indptr), shape=(self.n_items, self.n_users))

    def subset(self, mask: np.ndarray) -> Interactions:
        """The interactions where ``mask`` holds, over the same id spaces (for splits and deletions)."""
        ts = None if self.timestamp is None else self.timestamp[mask]
        return Interactions(self.user[mask], self.item[mask], self.rating[mask], self.user_ids, self.item_ids, ts)

    def fingerprint(self) -> str:
        """Content hash of the (user, item, rating) set and the id lists: ties a model to its data."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        # Asked for several times per refresh (model path, store, run plan): hashed once.
        return fingerprint_of(len(self), row_digest(self.user, self.item, self.rating), self.user_ids, self.item_ids)

    def rating_mean(self) -> float:
        """The mean rating, exactly rounded: the same value however the table was read or chunked."""
        return RatingSum.of(self.rating).mean_of(len(self))

    def rating_range(self) -> tuple[float, float]:
        return (float(self.rating.min()), float(self.rating.max())) if len(self) else (0.0, 0.0)


# splitmix64's finaliser: a bijection of 64-bit words whose every output bit depends on every input bit.
_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27), np.uint64(0x94D049BB133111EB), np.uint64(31))


def _mix(x: np.ndarray) -> np.ndarray:
    s1, m1, s2, m2, s3 = _MIX
    x = (x ^ (x >> s1)) * m1
    x = (x ^ (x >> s2)) * m2
    return x ^ (x >> s3)


def row_digest(user: np.ndarray, item: np.ndarray, rating: np.ndarray) -> np.ndarray:
    """Two 64-bit sums (mod 2⁶⁴) of per-row hashes of (user, item, rating): (2,) uint64.

    A sum does not depend on the rows' order or on how they are split, so a table read in chunks by
    many tasks has the digest of the same table read whole: the sum of its chunks' digests.
    """
    with np.errstate(over="ignore"):
        key = (np.asarray(user, np.uint64) << np.uint64(32)) | np.asarray(item, np.uint32).astype(np.uint64)
        bits = np.ascontiguousarray(rating, np.float64).view(np.uint64)
        first = _mix(key ^ _mix(bits))
        second = _mix(first ^ (bits * np.uint64(0x9E3779B97F4A7C15) + key))
        return np.array([first.sum(dtype=np.uint64), second.sum(dtype=np.uint64)], np.uint64)


def fingerprint_of(n: int, digest: np.ndarray, user_ids: pa.Array, item_ids: pa.Array) -> str:
    """The data fingerprint from the row count, ``row_digest`` (summed over chunks) and the id lists."""
    h = hashlib.sha256(b"dxplain-rows-v2")
    h.update(np.array([n], np.int64).tobytes())
    h.update(np.asarray(digest, np.uint64).tobytes())
    for ids in (user_ids, item_ids):
        h.update(str(ids.type).encode())
        # concat_arrays re-bases a sliced array at offset 0, so its buffers are its content.
        for buf in pa.concat_arrays([ids]).buffers():
            if buf is not None:
                h.update(buf)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class RatingSum:
    """An exact sum of float64 ratings as ``Σ_e count_e · 2^e`` over binary exponents, so chunks add up
    to the whole table's sum exactly, whatever their split: the mean μ that a model is centred by is the
    same from a streamed load as from an in-memory one (a float sum would differ in its last bits)."""

    terms: dict  # exponent → integer multiple of 2^exponent

    @classmethod
    def of(cls, y: np.ndarray) -> RatingSum:
        # y = M·2^(e−53) with |M| < 2^53 an integer; split M into 26- and 27-bit halves so that float64 sums
        # of up to 2^26 rows per exponent stay exact (bincount adds in float64: 2^26 · 2^27 = 2^53).
        y = np.asarray(y, np.float64)
        for s in (0, 1, 2):  # the common case, ratings on a grid of 1, ½ or ¼: one exact integer sum
            scaled = y * float(1 << s)
            if len(y) < 1 << 31 and np.all(np.abs(scaled) < 2.0**31):
                whole = scaled.astype(np.int64)
                if np.array_equal(whole, scaled):
                    return cls({-s: int(whole.sum())})
        terms: dict[int, int] = {}
        for lo in range(0, len(y), 1 << 26):
            m, e = np.frexp(y[lo : lo + (1 << 26)])
            M = (m * 2.0**53).astype(np.int64)
            e0 = int(e.min()) if len(e) else 0
            for half, shift in ((M >> 26, 26), (M & ((1 << 26) - 1), 0)):
                sums = np.bincount(e - e0, weights=half)
                for off in np.flatnonzero(sums):
                    key = e0 + int(off) - 53 + shift
                    terms[key] = terms.get(key, 0) + int(sums[off])
        return cls(terms)

    def __add__(self, other: RatingSum) -> RatingSum:
        terms = dict(self.terms)
        for e, c in other.terms.items():
            terms[e] = terms.get(e, 0) + c
        return RatingSum(terms)

    def value(self) -> Fraction:
        return sum((Fraction(c) * Fraction(2) ** e for e, c in self.terms.items()), Fraction(0))

    def mean_of(self, n: int) -> float:
        return float(self.value() / n) if n else 0.0


@dataclass(frozen=True)
class RowStats:
    """What a flow needs of a table's rows: degrees, an exact rating sum and range, the row digest. Chunks'
    stats add up to the whole table's (``total``), so tasks can compute them over the chunks they read."""

    user_counts: np.ndarray  # degree of user user_lo + n at n: from 0 over all users, or a chunk's own range
    item_counts: np.ndarray
    ratings: RatingSum
    rating_min: float
    rating_max: float
    digest: np.ndarray
    user_lo: int = 0
    item_lo: int = 0
    shape: tuple[int, int] | None = None  # (users, items) of the id spaces when the counts are a range

    @classmethod
    def of(
        cls, user: np.ndarray, item: np.ndarray, rating: np.ndarray, n_users: int, n_items: int, compact: bool = False
    ) -> RowStats:
        """The rows' stats; ``compact``: their counts over the range of ids the rows hold only, what a task
        sends to be summed. A chunk of a user-sorted table holds a narrow range of users, while full-length
        counts would send O(users + items) per chunk."""

        def counts(ids, n):
            if not compact:
                return 0, np.bincount(ids, minlength=n)
            lo = int(ids.min()) if len(ids) else 0
            return lo, np.bincount(ids - lo).astype(np.int32)  # a chunk's count fits; half the bytes sent

        (user_lo, uc), (item_lo, ic) = counts(user, n_users), counts(item, n_items)
        return cls(
            uc,
            ic,
            RatingSum.of(rating),
            float(rating.min()) if len(rating) else np.inf,
            float(rating.max()) if len(rating) else -np.inf,
            row_digest(user, item, rating),
            user_lo,
            item_lo,
            (n_users, n_items) if compact else None,
        )

    @classmethod
    def total(cls, stats) -> RowStats | None:
        """Σ of ``stats`` (an iterable: tasks' results as they finish), counted into one pair of arrays over
        all ids, so that one sum and one result are held at a time."""
        total = None
        for s in stats:
            shape = s.shape or (len(s.user_counts), len(s.item_counts))
            if total is None:
                total = RowStats(
                    np.zeros(shape[0], np.int64),
                    np.zeros(shape[1], np.int64),
                    RatingSum({}),
                    np.inf,
                    -np.inf,
                    np.zeros_like(s.digest),
                )
            if shape != (len(total.user_counts), len(total.item_counts)):
                raise ValueError(
                    f"row stats over {shape} users × items added to a total over "
                    f"{(len(total.user_counts), len(total.item_counts))}"
                )
            total.user_counts[s.user_lo : s.user_lo + len(s.user_counts)] += s.user_counts
            total.item_counts[s.item_lo : s.item_lo + len(s.item_counts)] += s.item_counts
            with np.errstate(over="ignore"):  # the digest is a sum mod 2⁶⁴
                digest = total.digest + s.digest
            total = RowStats(
                total.user_counts,
                total.item_counts,
                total.ratings + s.ratings,
                min(total.rating_min, s.rating_min),
                max(total.rating_max, s.rating_max),
                digest,
            )
        return total


@dataclass(frozen=True, eq=False)
class TableSummary(IdSpaces):
    """What a flow keeps of an interaction table it never holds whole (the parts hold the rows): the id
    lists and ``RowStats``, O(users + items). It answers the questions the flow asks of ``Interactions``
    (``len``, ``n_users``, degrees, ``fingerprint``, ``rating_mean``, ``rating_range``) with the same values."""

    user_ids: pa.Array
    item_ids: pa.Array
    stats: RowStats

    def __len__(self) -> int:
        return int(self.stats.user_counts.sum())

    def user_degree(self) -> np.ndarray:
        return self.stats.user_counts

    def item_degree(self) -> np.ndarray:
        return self.stats.item_counts

    @property
    def user_indptr(self) -> np.ndarray:
        """``Interactions.user_indptr`` of the table: where each user's rows start in (user, item) order."""
        return np.concatenate([[0], np.cumsum(self.stats.user_counts)])

    @property
    def item_indptr(self) -> np.ndarray:
        """``Interactions.item_indptr`` of the table: where each item's rows start in the by-item order."""
        return np.concatenate([[0], np.cumsum(self.stats.item_counts)])

    def fingerprint(self) -> str:
        return fingerprint_of(len(self), self.stats.digest, self.user_ids, self.item_ids)

    def rating_mean(self) -> float:
        return self.stats.ratings.mean_of(len(self))

    def rating_range(self) -> tuple[float, float]:
        return self.stats.rating_min, self.stats.rating_max


def stable_id_order(ids: np.ndarray) -> np.ndarray:
    """``np.argsort(ids, kind="stable")`` (int64) for integer ids, by radix passes over 16-bit digits.

    numpy's stable sort of 16-bit keys is a radix sort; of wider integers, a timsort, several times slower.
    Ids spanning up to 2³² values take two stable passes (the low digit, then the high one), still linear."""
    ids = np.asarray(ids)
    if len(ids) == 0:
        return np.empty(0, np.int64)
    low = int(ids.min())
    span = int(ids.max()) - low
    if span >= 1 << 32:
        return np.argsort(ids, kind="stable").astype(np.int64)
    offset = ids.astype(np.int64) - low
    if span < 1 << 16:
        return np.argsort(offset.astype(np.uint16), kind="stable").astype(np.int64)
    order = np.argsort((offset & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((offset[order] >> 16).astype(np.uint16), kind="stable")].astype(np.int64)


def segment_positions(indptr: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ranges indptr[g]:indptr[g+1] for each g in ``ids``, and the pointer into them."""
    ids = np.asarray(ids, dtype=np.int64)
    starts, lengths = indptr[ids], indptr[ids + 1] - indptr[ids]
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    pos = np.arange(ptr[-1]) - np.repeat(ptr[:-1] - starts, lengths)
    return pos.astype(np.int64), ptr


@dataclass
class Targets:
    """(user, item) index pairs to explain, sorted by user; ``rec_rank`` is 1-based (0 when supplied without one)."""

    user: np.ndarray
    item: np.ndarray
    rec_rank: np.ndarray

    def __len__(self) -> int:
        return len(self.user)

    @classmethod
    def from_pairs(cls, user, item, rec_rank=None) -> Targets:
        user, item = np.asarray(user, np.int32), np.asarray(item, np.int32)
        rank = np.zeros(len(user), np.int32) if rec_rank is None else np.asarray(rec_rank, np.int32)
        order = np.lexsort((rank, item, user)) if rec_rank is None else np.lexsort((rank, user))
        return cls(user[order], item[order], rank[order])

    def for_user_range(self, lo: int, hi: int) -> Targets:
        """The targets of users lo:hi: one slice, since targets are sorted by user."""
        a, b = np.searchsorted(self.user, [lo, hi])
        return self.take(slice(int(a), int(b)))

    def take(self, index: np.ndarray) -> Targets:
        """The targets at ``index`` (positions or a mask), in that order."""
        return Targets(self.user[index], self.item[index], self.rec_rank[index])


def equal_cuts(indptr: np.ndarray, n_ranges: int) -> np.ndarray:
    """Boundaries of contiguous row ranges holding about equal numbers of interactions (rows never split).

    ``indptr`` is a CSR pointer (by user or by item); returns ``edges`` with range r = rows edges[r]:edges[r+1]
    (at most ``n_ranges`` of them: the parts of a store, a refresh's shards).
    """
    n = len(indptr) - 1
    bounds = np.searchsorted(indptr, np.linspace(0, indptr[-1], max(1, n_ranges) + 1)[1:-1])
    return np.unique(np.concatenate([[0], np.clip(bounds, 0, n), [n]])).astype(np.int64)
