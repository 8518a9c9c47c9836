"""The docs' tables of the scaling area, from ``benchmarks/results/scaling/``."""

from __future__ import annotations

import json

import numpy as np

from benchmarks.common import RESULTS, include, load_result, markdown


def heavy_items_table(r: dict) -> str:
    """docs/scaling.md: the heaviest items' user side, before, exact and by HNSW."""

    def ann(item, metric, ef):
        h = next(h for h in item["hnsw"] if h["metric"] == metric and h["ef_search"] == ef)
        return f"{h['seconds']:.3g} s, recall {(h['recall_positive'] + h['recall_negative']) / 2:.3f}"

    return markdown(
        "| item raters | before (re-gather per chunk) | exact, norm-ordered | HNSW inner product, ef 32 | ef 128 | "
        "HNSW on the L2 augmentation, ef 128 |",
        [
            f"| {it['raters']:,} | {it['split_seconds']:.3g} s | **{it['streamed_seconds']:.3g} s** "
            f"({it['streamed_speedup_vs_split']:.1f}×) | {ann(it, 'inner-product', 32)} | "
            f"{ann(it, 'inner-product', 128)} | {ann(it, 'l2-augmented', 128)} |"
            for it in r["items"]
        ],
    )


def throughput_table() -> str:
    """docs/scaling.md: explanation throughput, fused and numpy against a loop and plain matmul."""
    rows = [
        "| data set | \\|D\\| | users × top-10 targets | scored pairs | fused pairs/s | numpy pairs/s | "
        "per-pair loop pairs/s | fused GFLOP/s | numpy GFLOP/s | same-shape matmul GFLOP/s | fused share | "
        "numpy share | 4096² GEMM GFLOP/s | fused share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("movielens-100k", "synthetic-5m"):
        f = RESULTS / "scaling" / f"explain_throughput_{name}.json"
        if not f.exists():
            continue
        r = json.loads(f.read_text())
        fused = (
            (
                f"{r['fused_pairs_per_s'] / 1e6:.1f} M",
                f"{r['fused_gflops']:.2f}",
                # One decimal: #22's targets are 30% and 50%, and 29.6% must not print as 30%.
                f"{r['fused_fraction_of_same_shape_matmul']:.1%}",
                f"{r['fused_fraction_of_plain_gemm']:.0%}",
            )
            if "fused_gflops" in r
            else ("—",) * 4
        )
        rows.append(
            f"| {name} | {r['interactions']:,} | {r['users_explained']:,} | {r['scored_pairs']:,} | "
            f"{fused[0]} | {r['batched_pairs_per_s'] / 1e6:.1f} M | {r['loop_pairs_per_s'] / 1e6:.2f} M | "
            f"{fused[1]} | {r['batched_gflops']:.2f} | {r['stacked_matmul_gflops_same_shapes']:.1f} | "
            f"{fused[2]} | {r['fraction_of_same_shape_matmul']:.0%} | "
            f"{r['plain_gemm_gflops_4096']:.1f} | {fused[3]} |"
        )
    return "\n".join(rows)


def own_topn_table() -> str:
    """The refresh's recommend stage with own top-10 targets before (dense GEMM) and after (bounded scan),
    beside the kernels' single-core cost per user and the HNSW index measured against them."""
    kernel = {r["size"]: r for r in load_result("scaling/own_topn.json")}
    before = {r["size"]: r for r in load_result("scaling/own_before.json")}
    after = {r["size"]: r for r in load_result("scaling/scaling.json") if r["mode"] == "own"}

    def stage(rows, n):
        return f"{rows[n]['recommend_wall_s']:.1f} s" if n in rows else "—"

    def hnsw(k):
        return "; ".join(f"ef {h['ef_search']}: {h['recall']:.3f}, {h['us_per_user']:,.0f} µs" for h in k["hnsw"])

    body = []
    for size in sorted(kernel, key=lambda x: kernel[x]["interactions"]):
        k, n = kernel[size], {"5m": 5_000_000, "20m": 20_000_000, "50m": 50_000_000}.get(size)
        sh = k["scan_shares"]
        body.append(
            f"| {k['interactions']:,} | {k['users']:,} × {k['items']:,} | {stage(before, n)} | "
            f"{stage(after, n)} | {k['dense_us_per_user']:,.0f} | {k['scan_us_per_user']:,.0f} "
            f"({k['dense_us_per_user'] / k['scan_us_per_user']:.1f}×) | {sh['block_scores']:.1%} / "
            f"{sh['bounds']:.1%} / {sh['candidates']:.2%} | {k['users_differing']} of {k['sampled_users']:,} | "
            f"{hnsw(k)} (build {k['hnsw_build_s']:.0f} s) |"
        )
    return markdown(
        "| interactions | users × items | recommend stage, dense (before) | bounded scan (after) | "
        "dense µs/user, one core | scan µs/user | scores exact in blocks / bounded / exact as candidates | "
        "users whose items differ | HNSW: recall of the top-10, µs/user |",
        body,
    )


def amazon_sbq_table(r: dict) -> str:
    """docs/prototypes.md: the Amazon-like SBQ runs, of explicit ratings (``amazon/sbq.json``) or of their
    implicit reading (``amazon/sbq_implicit.json``, whose model may be the negatives run's)."""
    rows = [
        "| interactions | candidates | targets (distinct items) | train (sweeps) | SBQ: load | SBQ: select, m = 100 | "
        "flow peak | worker peaks | whole-table check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    runs = sorted(r["runs"].values(), key=lambda x: x["interactions"])
    for run in runs:
        sbq, train = run["sbq"], run["train"]
        workers = worker_peaks(sbq["peak_rss_mib"])
        check = run.get("check")
        check = (
            "—"
            if check is None
            else (f"same, weights within {check['max_weight_rel_diff']:.0e}" if check["same_prototypes"] else "differs")
        )
        trained = f"{train['stage_seconds']['train']:.1f} s ({run['max_sweeps']}" + (
            ", the negatives run's)" if train.get("from") else ")"
        )
        rows.append(
            f"| {run['interactions']:,} | {sbq['candidates']:,} | {run['targets']:,} "
            f"({run['distinct_target_items']:,}) | {trained} | {sbq['stage_seconds']['load']:.1f} s | "
            f"{sbq['stage_seconds']['select']:.1f} s | {sbq['peak_rss_mib']['flow']:,.0f} MiB | "
            f"{workers} MiB | {check} |"
        )
    rows += slope_line(
        runs,
        lambda x, st: (x["train"] if st == "train" else x["sbq"])["stage_seconds"][st],
        ("load", "train", "select"),
    )
    for size, run in r.get("stopped", {}).items():
        rows += ["", f"Not completed, {size} ({run['candidates']:,} candidates): {run['note']}."]
    return "\n".join(rows)


def slope_line(runs: list, seconds, stages) -> list[str]:
    """Issue 24's cost slope, from 5M (when measured) to the largest size: d log(cost) / d log(|P|)."""
    measured = [x for x in runs if x["interactions"] >= 5_000_000] if len(runs) > 2 else runs
    if len(measured) < 2:
        return []
    lo, hi = measured[0], measured[-1]
    return [
        "",
        f"Cost slope from {lo['interactions'] / 1e6:g}M to {hi['interactions'] / 1e6:g}M interactions "
        "(1 = linear): "
        + ", ".join(
            f"{st} {np.log(seconds(hi, st) / seconds(lo, st)) / np.log(hi['interactions'] / lo['interactions']):.2f}"
            for st in stages
        )
        + ".",
    ]


def worker_peaks(peaks: dict) -> str:
    return " / ".join(f"{v:,.0f}" for v in sorted(peaks["workers"].values()))


def amazon_negatives_table(r: dict) -> str:
    """docs/negatives.md: the Amazon-like negatives runs, stage seconds and peaks per size."""
    stages = ("load", "partition", "train", "flag")
    rows = [
        "| interactions = \\|P\\| | \\|D\\| = \\|P\\| + \\|N\\| | users × items | "
        + " | ".join(stages)
        + " | sweeps | ‖∇f‖ / λ | flow peak | worker peaks | in-memory run, closed form |",
        "|---|---|---|" + "---|" * len(stages) + "---|---|---|---|---|",
    ]
    runs = sorted(r["runs"].values(), key=lambda x: x["interactions"])
    for run in runs:
        workers = worker_peaks(run["peak_rss_mib"])
        check = run.get("check")
        if check is not None:
            same = (
                "no in-memory run"
                if "same_flagged" not in check
                else "same flagged set"
                if check["same_flagged"]
                else "flagged sets differ"
            )
            check = (
                f"{same}, naive sum within {check['closed_form_max_rel_diff']:.0e} on "
                f"{check['closed_form_negatives']:,} negatives"
            )
        rows.append(
            f"| {run['positives']:,} | {run['positives'] + run['negatives_total']:,} | "
            f"{run['users']:,} × {run['items']:,} | "
            + " | ".join(f"{run['stage_seconds'][st]:.1f} s" for st in stages)
            + f" | {run['sweeps']} | {run['grad_norm'] / run['lam']:.1e} | "
            f"{run['peak_rss_mib']['flow']:,.0f} MiB | {workers} MiB | {check or '—'} |"
        )
    rows += slope_line(runs, lambda x, st: x["stage_seconds"][st], stages)
    return "\n".join(rows)


scaling_table = include("scaling/scaling.md")


def implicit_default_table(r: dict) -> str:
    """docs/scaling.md: ``dxplain refresh`` with its defaults on the Amazon-like implicit sets."""
    rows = [
        "| interactions | model | sweeps | wall s | train · explain s | fidelity max item · user "
        "| peak MiB flow · workers |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        st, fid, ms = x["stage_seconds"], x["fidelity_max_rel_error"], x["model_settings"]
        rows.append(
            f"| {x['interactions']:,} | {x['model_kind']} ({ms['convention']}, α {ms['alpha']:g}) "
            f"| {x['sweeps']} | {x['wall_s']:.1f} | {st['train']:.1f} · {st['recommend_explain_write']:.1f} "
            f"| {fid['item']:.1e} · {fid['user']:.1e} "
            f"| {x['peak_rss_mib']['flow']:,.0f} · {worker_peaks(x['peak_rss_mib'])} |"
        )
    return "\n".join(rows)
