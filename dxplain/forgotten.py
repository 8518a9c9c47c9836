"""Forgotten users and items (``dxplain forget``): ids whose rows every later refresh drops at load.

Ids are compared as strings, the form a command line gives them in, whatever the dataset's id type (an integer id
7 is forgotten as "7"). Dropping a user's rows can leave an item with none (rated by that user only): such an
id leaves the id space too, so the new run, its model and its part store hold no trace of the forgotten ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .interactions import Interactions


def as_strings(ids) -> pa.Array:
    """Ids as a plain string array (decoded from a dictionary, or cast from integers)."""
    a = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else pa.array(ids)
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    return a if pa.types.is_string(a.type) else pc.cast(a, pa.string())


@dataclass(frozen=True)
class Forgotten:
    users: pa.Array  # strings, sorted, no repeats
    items: pa.Array

    @classmethod
    def none(cls) -> Forgotten:
        return cls(pa.array([], pa.string()), pa.array([], pa.string()))

    @classmethod
    def of(cls, users, items) -> Forgotten:
        return cls(*(pc.unique(as_strings(x)).sort() for x in (users, items)))

    def __bool__(self) -> bool:
        return len(self.users) + len(self.items) > 0

    def union(self, other: Forgotten) -> Forgotten:
        return Forgotten.of(pa.concat_arrays([self.users, other.users]), pa.concat_arrays([self.items, other.items]))

    def forgets(self, ids, side: str) -> np.ndarray:
        """Whether each id (of ``side``, "user" or "item") is forgotten, as a bool array."""
        value_set = self.users if side == "user" else self.items
        return pc.is_in(as_strings(ids), value_set=value_set).to_numpy(zero_copy_only=False)

    def kept_rows(self, user, item) -> np.ndarray:
        """Rows (their user and item id columns) that name no forgotten id."""
        return ~(self.forgets(user, "user") | self.forgets(item, "item"))

    def drop_from(self, data: Interactions) -> tuple[Interactions, int]:
        """``data`` without the forgotten ids' rows, over the ids that keep a row; (that, rows dropped)."""
        keep = ~(self.forgets(data.user_ids, "user")[data.user] | self.forgets(data.item_ids, "item")[data.item])
        if keep.all():
            return data, 0
        d = data.subset(keep)
        users, user_index = np.unique(d.user, return_inverse=True)
        items, item_index = np.unique(d.item, return_inverse=True)
        kept = Interactions.from_indices(
            user_index,
            item_index,
            d.rating,
            data.user_ids.take(pa.array(users)),
            data.item_ids.take(pa.array(items)),
            d.timestamp,
        )
        return kept, int((~keep).sum())
