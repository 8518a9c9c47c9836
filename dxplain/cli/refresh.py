"""``dxplain refresh``: the nightly refresh."""

from __future__ import annotations

import sys

from .common import flow_options, print_summary, run_flow, run_options


def cmd_refresh(a) -> int:
    from ..flows.refresh import CONSTRAINTS, check_kind_options, refresh

    summary = run_flow(refresh, CONSTRAINTS, a, interactions=True, check=check_kind_options)
    print_summary(summary)
    if summary.get("fidelity_warning"):
        print(f"warning: {summary['fidelity_warning']}", file=sys.stderr)
    out = str(summary["run"]).rsplit("/runs/", 1)[0]  # the output root, wherever --out/DXPLAIN_OUT put it
    print(f"\nResults: {summary['run']} (LATEST in {out} points here)")
    from ..io import runs
    from .explain import print_explanation

    first = runs.first_target(summary["run"])
    if first is not None:
        print(f"\nExample — dxplain explain --run {summary['run']} --user {first['user']} --item {first['item']}\n")
        print_explanation(summary["run"], str(first["user"]), str(first["item"]), a.dataset, limit=5)
    return 0


def register(sub) -> None:
    from ..flows.refresh import refresh

    r = sub.add_parser("refresh", help="explain every user's top-N recommendations and publish a run")
    flow_options(
        r,
        refresh,
        [
            "dataset",
            "model",
            "top_n",
            "top_k",
            "top_unobserved",
            "targets",
            "k",
            "lam",
            "seed",
            "max_sweeps",
            "newton_steps",
            "implicit",
            "neg_samples",
            "neg_weight",
            "tol",
            "strict",
            "keep",
            "skip_unseen",
            "model_kind",
            "convention",
            "alpha",
            "lam_bias",
            "select",
            "lock_wait",
            "cold",
        ],
    )
    run_options(
        r,
        refresh,
        "user shards (default 4 per worker, or more so that no shard holds over 8M output rows)",
        "run the shards",
    )
    r.set_defaults(func=cmd_refresh)
