"""The ml-100k 80/20 split the CLI run in docs/kolmogorov.md uses: a prepared training folder (with the
item titles) and a test Parquet file (user, item, rating); a pair is a test pair with probability 0.2
(seed 0), as in benchmarks/kolmogorov/table4.py.

    python -m benchmarks.kolmogorov.split /tmp/kmrun
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.io.dataset_folders import write_dataset


def main(folder: str) -> None:
    ds = resolve_dataset("movielens-100k")
    d = ds.interactions
    test = np.random.default_rng(0).random(len(d)) < 0.2
    u, i = d.user_ids.to_numpy(), d.item_ids.to_numpy()

    def table(mask):
        return pa.table({"user": u[d.user[mask]], "item": i[d.item[mask]], "rating": d.rating[mask]})

    Path(folder).mkdir(parents=True, exist_ok=True)
    write_dataset(Path(folder) / "ml100k-train", table(~test), item_features=ds.items)
    pq.write_table(table(test), Path(folder) / "test.parquet")
    print(f"{(~test).sum()} training and {test.sum()} test pairs in {folder}")


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("folder", help="where the training folder and test.parquet go")
    main(ap.parse_args().folder)
