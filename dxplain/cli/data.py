"""``dxplain datasets``, ``dxplain train`` and ``dxplain import-embeddings``: data and models in, no flow."""

from __future__ import annotations

import json

from ..errors import DxplainError
from ..models.als.trainer import DEFAULT_K
from ..params import FACTORS, Interval, validate

# train's own options beside the factor rules; --model and --convention are checked by models.catalog
TRAIN = {**FACTORS, "k": Interval(int, 1, example=32), "alpha": Interval(float, 0, open_low=True, example=1.0)}
TRAIN["lam_bias"] = FACTORS["lam"]
IMPORT = {"lam": FACTORS["lam"], "alpha": TRAIN["alpha"]}
IMPORT_LOSSES = ("squared", "ials")
LAM_HELP = "λ when training (default 30/|D|, a ridge of 15 per solve: 3e-4 on ml-100k, chosen on validation)"


def _columns(spec: str | None) -> dict | None:
    if not spec:
        return None
    try:
        return dict(kv.split("=", 1) for kv in spec.split(","))
    except ValueError:
        raise DxplainError(
            f"--columns {spec!r}: use dxplain=file pairs, e.g. user=reviewerID,item=asin,rating=overall"
        ) from None


def _refuse_existing(a) -> None:
    """Commands that write ``--out`` whole replace nothing by accident: an existing path needs ``--force``."""
    from ..io.atomic import exists

    if getattr(a, "out", None) and exists(a.out) and not a.force:
        raise DxplainError(f"--out {a.out}: already exists; pass --force to replace it, or choose another path")


def _features(path: str | None, what: str):
    """An optional user/item feature table (CSV/Parquet with an ``id`` column; ``|``-separated genres split)."""
    if not path:
        return None
    import pyarrow.compute as pc

    from ..io.tables import read_table

    table = read_table(path)
    if "id" not in table.column_names:
        raise DxplainError(f"--{what} {path}: needs an 'id' column naming the {what[:-1]}; found {table.column_names}")
    if "genres" in table.column_names and table.schema.field("genres").type == "string":
        table = table.set_column(
            table.column_names.index("genres"), "genres", pc.split_pattern(table.column("genres"), "|")
        )
    return table


def cmd_datasets(a) -> int:
    from ..config import Settings

    _refuse_existing(a)

    settings = Settings.from_env()
    if a.action == "fetch":
        from ..datasets import registry

        if a.name not in registry.ALIASES:
            raise DxplainError(f"unknown dataset {a.name!r}; known: movielens-100k")
        ds = registry.resolve_dataset(a.name, settings)
        print(
            f"{a.name}: {len(ds.interactions)} interactions, {ds.interactions.n_users} users, "
            f"{ds.interactions.n_items} items (prepared under {settings.data_home}/datasets)"
        )
    elif a.action == "synth":
        from ..datasets.synthetic import generate

        print(
            json.dumps(
                generate(
                    a.out,
                    a.interactions,
                    n_users=a.users,
                    n_items=a.items,
                    seed=a.seed,
                    kind=a.kind,
                    implicit=a.implicit,
                )
            )
        )
    elif a.action == "import":
        from pathlib import Path

        from ..datasets import movielens
        from ..io.dataset_folders import write_dataset
        from ..io.tables import read_table

        if Path(a.path).is_dir() and movielens.layout(Path(a.path)):  # MovieLens files: titles, genres, users
            ds = movielens.prepare(Path(a.path), Path(a.out))
        else:
            ds = write_dataset(
                a.out,
                read_table(a.path, _columns(a.columns)),
                _features(a.users, "users"),
                _features(a.items, "items"),
                source=a.path,
            )
        print(
            f"{a.out}: {len(ds.interactions)} interactions, {ds.interactions.n_users} users, "
            f"{ds.interactions.n_items} items"
        )
    return 0


def cmd_train(a) -> int:
    from ..datasets import resolve_dataset
    from ..models.catalog import TrainSettings, train

    validate(TRAIN, vars(a))
    settings = TrainSettings(
        model=a.model, k=a.k, lam=a.lam, lam_bias=a.lam_bias, convention=a.convention, alpha=a.alpha,
        select=a.select, seed=a.seed,
    )  # fmt: skip
    settings.check()
    _refuse_existing(a)
    ds = resolve_dataset(a.dataset)
    m, table = train(ds.interactions, settings)
    m.save(a.out, table)
    print(f"{a.out}: {describe(m)}")
    return 0


def describe(m) -> str:
    """One line on a trained model: its kind, rank, settings, how close to stationary, and what --select chose."""
    rank = m.settings.get("rank", m.k)
    extra = "".join(f" {name}={m.settings[name]:g}" for name in ("lam_bias", "alpha") if name in m.settings)
    convention = f" ({m.settings['convention']})" if "convention" in m.settings else ""
    line = f"{m.kind}{convention} k={rank} λ={m.lam:g}{extra}, ‖∇f‖={m.grad_norm:.1e}"
    chosen = m.settings.get("selected")
    if chosen:
        picked = ", ".join(f"{key}={chosen[key]:g}" for key in ("k", "lam", "lam_bias", "alpha") if key in chosen)
        line += f"; chosen on validation: {picked}"
    return line


def cmd_import_embeddings(a) -> int:
    from ..datasets import resolve_dataset
    from ..io.model_store import import_embeddings, read_embeddings

    validate(IMPORT, vars(a))
    if a.loss not in IMPORT_LOSSES:
        raise DxplainError(f"--loss {a.loss!r}: give one of {', '.join(IMPORT_LOSSES)}")
    if a.loss != "ials" and (a.convention is not None or a.alpha is not None):
        raise DxplainError("--convention and --alpha are the ials loss's settings: pass --loss ials, or drop them")
    _refuse_existing(a)
    ds = resolve_dataset(a.dataset)
    data = ds.interactions
    if a.loss == "squared":
        import_embeddings(a.out, data, a.user_factors, a.item_factors, a.user_ids, a.item_ids, lam=a.lam, mu=a.mu)
        print(f"{a.out}: imported factors for {data.n_users} users and {data.n_items} items")
        return 0
    from ..models.ials import DEFAULT_ALPHA
    from ..models.imports import import_ials

    U, V = read_embeddings(data, a.user_factors, a.item_factors, a.user_ids, a.item_ids)
    alpha = DEFAULT_ALPHA if a.alpha is None else a.alpha
    m = import_ials(U, V, data, a.convention or "implicit", alpha, a.lam, a.route)
    m.save(a.out, data)
    record = m.settings["import"]
    moved = ", ".join(f"{side} {v:.1e}" for side, v in record["moved"].items())
    how = (
        f"polished to stationarity in {record['sweeps']} sweeps, {record['seconds']:.1f}s (factors moved: {moved}; "
        f"{record['users_top20_changed']} users' top-20 changed)"
        if a.route == "polish"
        else f"users re-solved exactly against the items' factors (moved {moved}): the side over each user's "
        "own items sums exactly, an item's users do not"
    )
    print(f"{a.out}: iALS ({m.settings['convention']}, λ={m.lam:g}, α={alpha:g}) for {data.n_users} users and "
          f"{data.n_items} items, {how}")  # fmt: skip
    return 0


def register(sub) -> None:
    d = sub.add_parser("datasets", help="fetch, generate or import datasets")
    dsub = d.add_subparsers(dest="action", required=True)
    f = dsub.add_parser("fetch", help="download and prepare a named dataset")
    f.add_argument("name", help="movielens-100k (also ml-100k); other data: `dxplain datasets import`")
    s = dsub.add_parser("synth", help="generate a synthetic Zipf-degree rating set to Parquet")
    s.add_argument("--interactions", type=int, required=True, help="ratings to draw")
    s.add_argument("--users", type=int, help="users (default: interactions ÷ 5; not with --kind amazon)")
    s.add_argument("--items", type=int, help="items (default: interactions ÷ 15)")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument(
        "--kind",
        default="zipf",
        help="zipf (the scaling benchmarks' set), amazon (calibrated to "
        "Amazon's 2018 reviews: docs/scaling.md, 'Amazon-like data') or "
        "gammli (GAMMLI's eq. 6 with user_features/item_features.parquet: "
        "docs/gammli.md)",
    )
    s.add_argument("--implicit", action="store_true", help="every interaction a 1 (purchases, clicks)")
    s.add_argument("--out", required=True, help="the dataset folder to write")
    s.add_argument("--force", action="store_true", help="replace an existing --out")
    im = dsub.add_parser(
        "import",
        help="import a CSV/Parquet interaction file (or a MovieLens folder: u.data, ratings.dat) as a prepared dataset",
    )
    im.add_argument("path")
    im.add_argument("--out", required=True)
    im.add_argument("--columns", help="column mapping, e.g. user=reviewerID,item=asin,rating=overall")
    im.add_argument(
        "--items", help="item features (CSV/Parquet with an 'id' column; title, year, genres are shown in explanations)"
    )
    im.add_argument("--users", help="user features (CSV/Parquet with an 'id' column; age, occupation are shown)")
    im.add_argument("--force", action="store_true", help="replace an existing --out")
    d.set_defaults(func=cmd_datasets)

    t = sub.add_parser("train", help="train a factor model (mf, biased, ials, bce) and store it")
    t.add_argument(
        "--dataset",
        default="movielens-100k",
        help="a dataset name, folder or interaction file (default: movielens-100k)",
    )
    t.add_argument("--out", required=True, help="the model store to write (a .zarr folder)")
    t.add_argument(
        "--model",
        default="mf",
        help="mf (ALS-MF, default), biased (μ + b_u + c_i + ⟨U_u,V_i⟩), ials (confidence-weighted ALS), "
        "bce (BCE on positives and sampled negatives)",
    )
    t.add_argument("-k", "--k", type=int, help=f"rank (default {DEFAULT_K})")
    t.add_argument("--lam", type=float, help=LAM_HELP + "; ials: implicit's regularization or Spark's regParam")
    t.add_argument("--lam-bias", type=float, help="biased: λ_b on the biases (default 6/|D|, a ridge of 3)")
    t.add_argument("--convention", help="ials: implicit (default: implicit's AlternatingLeastSquares) or spark")
    t.add_argument("--alpha", type=float, help="ials: the confidence scale α, as the convention's library means it")
    t.add_argument(
        "--select",
        action="store_true",
        help="choose λ (and λ_b, or α for ials) on a seeded validation split, then refit on all the data",
    )
    t.add_argument("--seed", type=int, default=0, help="initialisation and split seed (default 0)")
    t.add_argument("--force", action="store_true", help="replace an existing --out")
    t.set_defaults(func=cmd_train)

    ie = sub.add_parser("import-embeddings", help="store factors trained elsewhere as a dxplain model")
    factors = (
        "{side} factors: a .npy or .zarr array (rows in --{side}-ids order), or a Parquet file with an 'id' "
        "column and either an 'embedding' list column or one column per factor"
    )
    ie.add_argument("--dataset", required=True, help="the interactions the factors were fitted on")
    ie.add_argument("--user-factors", required=True, help=factors.format(side="user"))
    ie.add_argument("--item-factors", required=True, help=factors.format(side="item"))
    ie.add_argument("--user-ids", help="the .npy/.zarr rows' ids: a text file, one a line, or Parquet with 'id'")
    ie.add_argument("--item-ids", help="the .npy/.zarr rows' ids: a text file, one a line, or Parquet with 'id'")
    ie.add_argument("--lam", type=float, help="λ if known (else the 1/(λ|D|) factor is dropped)")
    ie.add_argument("--mu", type=float, default=0.0, help="global offset added to scores")
    ie.add_argument(
        "--loss",
        default="squared",
        help="the loss the factors were trained on: squared (default) or ials (confidence-weighted ALS, "
        "e.g. implicit's AlternatingLeastSquares or Spark's implicitPrefs ALS)",
    )
    ie.add_argument("--convention", help="ials: implicit (default) or spark; --lam and --alpha mean what it means")
    ie.add_argument("--alpha", type=float, help="ials: the confidence scale α the factors were trained with")
    ie.add_argument(
        "--route",
        default="polish",
        help="ials: polish (train on to stationarity, then explain; default) or resolve (solve each user "
        "exactly against the items' factors, as implicit's explain does)",
    )
    ie.add_argument("--out", required=True, help="the model store to write (a .zarr folder)")
    ie.add_argument("--force", action="store_true", help="replace an existing --out")
    ie.set_defaults(func=cmd_import_embeddings)
