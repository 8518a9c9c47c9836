"""Prepare ml-100k (GroupLens layout) for ``dxplain gammli fit``: feature tables and a warm + cold split.

    python -m benchmarks.gammli.data [--src ../shared/data/ml-100k-grouplens] [--out bench-data/ml100k]

writes ``users.parquet`` (user, age, gender, occupation: the last two dictionary-encoded, i.e. categorical
by dtype), ``items.parquet`` (item, year, 19 genre flags; the one item without a release date gets the
median year), ``train.parquet`` and ``test.parquet`` (user, item, rating). The test file holds every
rating of a seeded 10% of users (cold users, never in training) and a seeded 20% of the other users'
ratings (warm); ``pairs.parquet`` is 50 test pairs for ``gammli explain``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import ROOT, parser
from dxplain.io.features import movielens_feature_tables


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--src", default=str(ROOT.parent / "shared" / "data" / "ml-100k-grouplens"))
    p.add_argument("--out", default=str(ROOT / "bench-data" / "ml100k"))
    p.add_argument("--cold-users", type=float, default=0.1)
    p.add_argument("--test", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    src, out = Path(a.src), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    users, items, ratings = movielens_feature_tables(src)
    pq.write_table(users, out / "users.parquet")
    pq.write_table(items, out / "items.parquet")
    u, i, y = (ratings.column(c).to_numpy() for c in ("user", "item", "rating"))
    rng = np.random.default_rng(a.seed)
    ids = np.unique(u)
    cold = np.isin(u, rng.choice(ids, int(round(a.cold_users * len(ids))), replace=False))
    test = cold | (rng.random(len(u)) < a.test)
    for name, sel in (("train", ~test), ("test", test)):
        pq.write_table(pa.table({"user": u[sel], "item": i[sel], "rating": y[sel]}), out / f"{name}.parquet")
    pick = rng.choice(np.flatnonzero(test), 50, replace=False)
    pq.write_table(pa.table({"user": u[pick], "item": i[pick]}), out / "pairs.parquet")
    print(f"{out}: {int((~test).sum())} train, {int(test.sum())} test ratings ({int(cold.sum())} of cold users)")


if __name__ == "__main__":
    main()
