"""Where values lie in a sorted array of distinct keys: the lookup the id lists, the item whiteners sent to
a shard and μ_T's per-user and per-item halves all need."""

from __future__ import annotations

import numpy as np


def find_sorted(keys: np.ndarray, wanted) -> tuple[np.ndarray, np.ndarray]:
    """(pos, hit): each wanted value's position in ``keys`` (sorted, distinct) and whether it is there
    (``pos`` is a valid index either way). The values are searched in sorted order, so each search starts
    where the last one ended (several times faster than searching them in their own order)."""
    wanted = np.asarray(wanted)
    if not len(keys):
        return np.zeros(len(wanted), np.int64), np.zeros(len(wanted), bool)
    order = np.argsort(wanted, kind="stable")
    pos = np.empty(len(wanted), np.int64)
    pos[order] = np.searchsorted(keys, wanted[order])
    pos = np.minimum(pos, len(keys) - 1)
    return pos, keys[pos] == wanted
