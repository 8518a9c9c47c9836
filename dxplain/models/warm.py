"""Warm starts: a refresh on grown data starts training from the previous run's model of the same lineage.

Known users and items keep their factor rows; new ones start at 0. The trainers' first sweep solves every user
exactly against those items (the new items contribute nothing yet) and then every item exactly against the users
(the new items' first real rows): the exact half-step solve of the new rows, from which the sweeps continue to the
same stopping rule as a cold fit. Biased MF's fixed columns are reset to κ by its half-steps, so a new row's bias
starts at 0 too. The optimum reached is judged, and explained, exactly as a cold fit's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class WarmStart:
    """The start a fit takes from a previous model: (U0, V0) on the new id spaces, and what it found."""

    source: str  # the previous model's store
    U: np.ndarray
    V: np.ndarray
    users_known: int
    users_new: int
    items_known: int
    items_new: int
    rows_before: int  # |D| of the previous model's data
    cold_sweeps: int | None  # sweeps of the last cold fit of this lineage: what a warm fit's sweeps are set against

    def record(self, rows_now: int, sweeps: int) -> dict:
        """What the run summary says about the start (``training_start``)."""
        return {
            "start": "warm",
            "from": self.source,
            "rows_added": rows_now - self.rows_before,
            "users_known": self.users_known,
            "users_new": self.users_new,
            "items_known": self.items_known,
            "items_new": self.items_new,
            "sweeps": sweeps,
            "last_cold_sweeps": self.cold_sweeps,
            "sweeps_saved": None if self.cold_sweeps is None else self.cold_sweeps - sweeps,
        }


def aligned(F: np.ndarray, ids_before: pa.Array, ids_now: pa.Array) -> tuple[np.ndarray, int]:
    """The rows of F (indexed by ``ids_before``) for ``ids_now``, 0 for ids it lacks; and how many it had."""
    if ids_before.type != ids_now.type:
        ids_before = ids_before.cast(ids_now.type)
    at = pc.index_in(ids_now, value_set=ids_before)
    known = pc.is_valid(at).to_numpy(zero_copy_only=False)
    rows = np.zeros((len(ids_now), F.shape[1]))
    rows[known] = np.asarray(F)[pc.drop_null(at).to_numpy()]
    return rows, int(known.sum())


def warm_start(source: str, U, V, ids_before: tuple, data, rows_before: int, cold_sweeps) -> WarmStart:
    """The start from a previous model (its factors U, V over ``ids_before`` = (user ids, item ids)) for ``data``
    (an ``Interactions`` or ``TableSummary``: its id lists)."""
    U0, users_known = aligned(U, ids_before[0], data.user_ids)
    V0, items_known = aligned(V, ids_before[1], data.item_ids)
    return WarmStart(
        source,
        U0,
        V0,
        users_known,
        data.n_users - users_known,
        items_known,
        data.n_items - items_known,
        rows_before,
        cold_sweeps,
    )
