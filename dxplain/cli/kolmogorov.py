"""``dxplain kolmogorov fit``: a Kolmogorov model (IKM), its rules and influential items (paper: Kolmogorov models)."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow, run_options, target_arguments


def cmd_fit(a) -> int:
    from ..flows.kolmogorov import CONSTRAINTS, kolmogorov_fit

    summary = run_flow(kolmogorov_fit, CONSTRAINTS, a)
    summary.pop("trace", None)
    summary.pop("validation", None)
    print_summary(summary)
    return 0


def cmd_why(a) -> int:
    """Read a fitted model (no flow): spell p̂_ui as its elementary events."""
    import numpy as np
    import pyarrow as pa

    from ..datasets import resolve_dataset
    from ..errors import InputError
    from ..io.model_store import read_model, read_model_ids
    from ..io.validation import index_of
    from ..kolmogorov.report import format_why

    if a.top < 1:
        raise InputError(f"--top {a.top}: give an integer ≥ 1 (typical items shown per event)")
    theta, psi, attrs = read_model(a.model)
    if attrs.get("kind") != "kolmogorov":
        raise InputError(
            f"--model {a.model}: a {attrs.get('kind')!r} model, not a Kolmogorov model; give the model/ "
            "folder that `dxplain kolmogorov fit` wrote"
        )
    user_ids, item_ids = read_model_ids(a.model)
    u = int(index_of(pa.array([a.user]), user_ids, "user", "--user")[0])
    i = int(index_of(pa.array([a.item]), item_ids, "item", "--item")[0])
    items = popularity = None
    if a.dataset:  # titles, and the popularity that ranks typical items
        ds = resolve_dataset(a.dataset, fetch=False)
        items = ds.items
        pos = index_of(ds.interactions.item_ids, item_ids, "item", "--dataset")
        popularity = np.bincount(pos[ds.interactions.item], minlength=len(item_ids))
    print(format_why(a.user, a.item, theta[u], psi, i, item_ids, items, popularity, a.top))
    return 0


def register(sub) -> None:
    from ..flows.kolmogorov import kolmogorov_fit

    k = sub.add_parser("kolmogorov", help="Kolmogorov models: P[u likes i] = θ_uᵀψ_i, rules and influential items")
    verbs = k.add_subparsers(dest="verb", required=True)
    f = verbs.add_parser("fit", help="fit by IKM; write metrics.json, rules.parquet, influence.parquet, model/")
    flow_options(
        f,
        kolmogorov_fit,
        [
            "dataset",
            "test",
            "dim",
            "solver",
            "iterations",
            "lam",
            "mu",
            "step",
            "r_min",
            "r_max",
            "feedback",
            "negatives",
            "like_threshold",
            "skip_unseen",
            "check_exhaustive",
            "max_rules",
            "seed",
            "force",
            "out",
        ],
    )
    run_options(f, kolmogorov_fit, "user and item shards per step (default 2 per worker)", "fit", out=False)
    f.set_defaults(func=cmd_fit)
    w = verbs.add_parser("why", help="spell one prediction p̂_ui = Σ_d θ_ud ψ_id as its elementary events")
    w.add_argument("--model", required=True, help="the model/ folder of a fit")
    target_arguments(w, "the training data: item titles, and popularity to rank typical items")
    w.add_argument("--top", type=int, default=3, help="typical items shown per event")
    w.set_defaults(func=cmd_why)
