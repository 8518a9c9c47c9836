"""``dxplain negatives``: likely false negatives in implicit feedback (paper App. C)."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow, run_options


def _threshold(raw: str) -> float | None:
    return None if raw.lower() == "none" else float(raw)


def cmd_negatives(a) -> int:
    from ..flows.negatives import CONSTRAINTS, negatives

    summary = run_flow(negatives, CONSTRAINTS, a, interactions=True)
    print_summary(summary)
    print(f"\nFlagged negatives: {summary['folder']}/flagged.parquet")
    return 0


def register(sub) -> None:
    from ..flows.negatives import negatives

    n = sub.add_parser("negatives", help="flag likely false negatives in implicit feedback (paper App. C)")
    flow_options(
        n,
        negatives,
        [
            "dataset",
            "percent",
            "method",
            "negatives",
            "neg_weight",
            "positive_threshold",
            "k",
            "lam",
            "seed",
            "retrain",
            "max_sweeps",
            "newton_steps",
        ],
        types_={"positive_threshold": _threshold},
    )
    run_options(n, negatives, "user shards of the scan (default 4 per worker)", "scan")
    n.set_defaults(func=cmd_negatives)
