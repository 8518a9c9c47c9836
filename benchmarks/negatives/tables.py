"""The docs' tables of the negatives area, from ``benchmarks/results/negatives/``."""

from __future__ import annotations

from benchmarks.common import include


def scan_table(r: dict) -> str:
    """docs/negatives.md: the all-unobserved scan's throughput and memory on the cluster."""
    workers = list(r["peak_rss_gib_per_worker"].values())
    return "\n".join(
        [
            "| users × items | positives | k | flagged (p) | workers × BLAS threads | scan s | pairs/s | "
            "pairs/s per worker | bare matmul pairs/s, one core | share of matmul | peak RSS per worker | "
            "peak RSS client |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {r['users']:,} × {r['items']:,} | {r['positives']:,} | {r['k']} | "
            f"{r['flagged']:,} ({r['percent']:g}%) | "
            f"{r['workers']} × {r['blas_threads_per_worker']} | {r['scan_seconds']:.1f} | "
            f"{r['pairs_per_second'] / 1e6:.0f}M | {r['pairs_per_second_per_worker'] / 1e6:.0f}M | "
            f"{r['bare_matmul_pairs_per_second_one_core'] / 1e6:.0f}M "
            f"({r['bare_matmul_gflops_one_core']:.1f} GFLOP/s) | "
            f"{r['fraction_of_matmul_rate']:.0%} | {max(workers):.2f} GiB | {r['peak_rss_gib_client']:.2f} GiB |",
        ]
    )


appc_table = include("negatives/appc.md")
appc_sampled4_table = include("negatives/appc_sampled4.md")
