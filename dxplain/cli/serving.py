"""``dxplain predict`` and ``dxplain recommend``: a stored model's predictions and top-N lists (no flow)."""

from __future__ import annotations

import logging

import numpy as np

from ..errors import InputError
from ..params import Interval, validate
from .data import _refuse_existing

log = logging.getLogger("dxplain")


def _model(path: str):
    from ..io.model_store import read_model_ids
    from ..models.base import FactorModel

    return FactorModel.load(path), read_model_ids(path)


def cmd_predict(a) -> int:
    import pyarrow as pa

    from ..io.targets import read_pairs, write_table_file
    from ..serving import model_rows, predict_pairs
    from ..vocabulary import Vocabulary

    _refuse_existing(a)
    model, (user_ids, item_ids) = _model(a.model)
    pairs = read_pairs(a.pairs)
    u = model_rows(Vocabulary(user_ids), pairs.column("user"), "user", a.pairs)
    i = model_rows(Vocabulary(item_ids), pairs.column("item"), "item", a.pairs)
    prediction, known = predict_pairs(model, u, i)
    table = pa.table(
        {"user": pairs.column("user"), "item": pairs.column("item"), "prediction": prediction, "known": known}
    )
    write_table_file(a.out, table)
    print(f"{a.out}: {len(table)} predictions, {int((~known).sum())} with a user or item the model lacks")
    return 0


def cmd_recommend(a) -> int:
    import pyarrow as pa

    from ..datasets import resolve_dataset
    from ..io.targets import read_id_list, write_table_file
    from ..serving import model_rows, recommend_rows, seen_in_model_rows
    from ..vocabulary import Vocabulary

    validate({"n": Interval(int, 1)}, vars(a))
    _refuse_existing(a)
    model, (user_ids, item_ids) = _model(a.model)
    data = resolve_dataset(a.dataset).interactions
    seen = seen_in_model_rows((user_ids, item_ids), data)
    vocabulary = Vocabulary(user_ids)
    if a.users:
        wanted = read_id_list(a.users, "user")
        rows = model_rows(vocabulary, wanted, "user", a.users)
    else:
        wanted = data.user_ids
        rows = model_rows(vocabulary, wanted, "user", a.dataset)
    lacking = int((rows < 0).sum())
    if lacking == len(rows):
        raise InputError(
            f"{a.users or a.dataset}: the model knows none of these users; list users the model was trained on"
        )
    if lacking:
        log.warning("%d of %d users are not in the model: no recommendations for them", lacking, len(rows))
    t = recommend_rows(model, seen, np.unique(rows[rows >= 0]), a.n)
    table = pa.table(
        {
            "user": user_ids.take(t.column("user")),
            "item": item_ids.take(t.column("item")),
            "rank": t.column("rank"),
            "score": t.column("score"),
        }
    )
    write_table_file(a.out, table)
    print(f"{a.out}: top {a.n} for {len(rows) - lacking} users ({len(table)} rows)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("predict", help="a stored model's prediction for each (user, item) pair of a file")
    p.add_argument("--model", required=True, help="the model store (a .zarr folder)")
    p.add_argument("--pairs", required=True, help="Parquet/CSV with user and item columns (original ids)")
    p.add_argument("--out", required=True, help="Parquet file: user, item, prediction, known (input order)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.set_defaults(func=cmd_predict)

    r = sub.add_parser("recommend", help="each user's top-N items by a stored model, none they have in --dataset")
    r.add_argument("--model", required=True, help="the model store (a .zarr folder)")
    r.add_argument("--dataset", required=True, help="the interactions whose items are never recommended")
    r.add_argument("-n", "--n", type=int, default=10, help="items per user (default 10)")
    r.add_argument("--users", help="Parquet/CSV with a user (or id) column: recommend to these only")
    r.add_argument("--out", required=True, help="Parquet file: user, item, rank, score")
    r.add_argument("--force", action="store_true", help="replace an existing --out")
    r.set_defaults(func=cmd_recommend)
