"""Render the docs' result tables from benchmarks/results/ (no figure is typed by hand).

    python benchmarks/report.py            # print every table
    python benchmarks/report.py --docs     # rewrite them between the markers of the docs/ pages
    python benchmarks/report.py --check    # exit 1 if a page differs from what --docs would write

A table lives between ``<!-- name -->`` and ``<!-- /name -->`` in exactly one page (``TABLES``). Tables
come from the JSON results, or, where a benchmark already writes its own Markdown (scaling, negatives
App. C, SBQ applications, case deletion), that Markdown is included as it is. ``--readme`` is kept as
an alias of ``--docs``: the README holds no result tables any more. ``tests/test_docs.py`` checks that
the committed pages equal this rendering.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def markdown(header: str, body: list[str]) -> str:
    """A Markdown table: ``header`` (``| a | b |``), the separator its column count implies, the rows."""
    return "\n".join([header, "|---" * (header.count("|") - 1) + "|", *body])


def lambda_table() -> str:
    r = json.loads((RESULTS / "select_lambda.json").read_text())
    n = r["train"]
    rows = [
        "| model | λ | ridge λ\\|D\\|/2 | validation RMSE | test RMSE | ‖∇f‖ at stop | effective rank | fit (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows.append(f"| global mean | | | {r['global_mean']['val_rmse']:.4f} | {r['global_mean']['test_rmse']:.4f} | | | |")
    b = r["user_item_biases"]
    rows.append(f"| user + item biases (reg {b['reg']}) | | | {b['val_rmse']:.4f} | {b['test_rmse']:.4f} | | | |")
    for g in r["grid"]:
        mark = " **(default)**" if g["lam"] == r["chosen"]["lam"] else ""
        rows.append(
            f"| ALS-MF k={r['k']}{mark} | {g['lam']:g} | {g['lam'] * n / 2:.1f} | {g['val_rmse']:.4f} | "
            f"{g['test_rmse']:.4f} | {g['grad_norm']:.1e} | {g['effective_rank']} | {g['seconds']} |"
        )
    return "\n".join(rows)


def throughput_table() -> str:
    rows = [
        "| data set | \\|D\\| | users × top-10 targets | scored pairs | fused pairs/s | numpy pairs/s | "
        "per-pair loop pairs/s | fused GFLOP/s | numpy GFLOP/s | same-shape matmul GFLOP/s | fused share | "
        "numpy share | 4096² GEMM GFLOP/s | fused share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("movielens-100k", "synthetic-5m"):
        f = RESULTS / f"explain_throughput_{name}.json"
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


def als_vs_implicit_table() -> str:
    f = RESULTS / "als_vs_implicit.json"
    res = json.loads(f.read_text())
    header = (
        f"| data set | users × items | ratings | k | dxplain trainer's sweep s (CG users, exact items) | "
        f"exact fused s/sweep | exact numpy s/sweep | implicit {res['implicit']} s/iteration | "
        f"trainer / implicit | exact fused / implicit | exact numpy / implicit |"
    )
    return markdown(
        header,
        [
            f"| {r['dataset']} | {r['users']:,} × {r['items']:,} | {r['ratings']:,} | {r['k']} | "
            f"{r['dxplain_trainer_s']:.3f} | {r['dxplain_fused_s']:.3f} | {r['dxplain_numpy_s']:.3f} | "
            f"{r['implicit_s']:.3f} | **{r['trainer_over_implicit']:.2f}×** | {r['fused_over_implicit']:.2f}× | "
            f"{r['numpy_over_implicit']:.2f}× |"
            for r in res["rows"]
        ],
    )


def converged_fit_table() -> str:
    r = json.loads((RESULTS / "converged_fit.json").read_text())
    header = (
        f"| identity tolerance | sweeps | Newton steps | dxplain fit s | implicit {r['implicit']} 15 iterations s "
        f"(median of {len(r['implicit_fit_seconds'])}) | dxplain / implicit | ‖∇f‖ | bound ε item · user | "
        f"measured max item · user | measured median item · user |"
    )
    return markdown(
        header,
        [
            f"| {f['identity_tol']:g} | {f['sweeps']} | {f['newton_steps']} | {f['seconds']:.1f} | "
            f"{r['implicit_fit_median_s']:.2f} | **{f['over_implicit']:.1f}×** | {f['grad_norm']:.1e} | "
            f"{f['identity_bound']['item']:.1e} · {f['identity_bound']['user']:.1e} | "
            f"{f['identity']['item']['max']:.1e} · {f['identity']['user']['max']:.1e} | "
            f"{f['identity']['item']['median']:.1e} · {f['identity']['user']['median']:.1e} |"
            for f in r["fits"]
        ],
    )


def heavy_items_table() -> str:
    r = json.loads((RESULTS / "heavy_items_synthetic-5m.json").read_text())

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


def own_topn_table() -> str:
    """The refresh's recommend stage with own top-10 targets before (dense GEMM) and after (bounded scan),
    beside the kernels' single-core cost per user and the HNSW index measured against them."""
    kernel = {r["size"]: r for r in json.loads((RESULTS / "own_topn.json").read_text())}
    before = {r["size"]: r for r in json.loads((RESULTS / "scaling" / "own_before.json").read_text())}
    after = {r["size"]: r for r in json.loads((RESULTS / "scaling" / "scaling.json").read_text()) if r["mode"] == "own"}

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


def negatives_scan_table() -> str:
    r = json.loads((RESULTS / "negatives_scan.json").read_text())
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


def sbq_scale_table() -> str:
    r = json.loads((RESULTS / "sbq_scale.json").read_text())
    rows = [
        "| case | Φ | greedy, 100 steps | per step | kernel evals/s | GFLOP/s (share of GEMM) | share of read bound | "
        "L⁻¹k state | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in r["cases"]:
        if c["case"] == "mf":
            k = c["p"] // (c["users"] + c["items"])
            phi = f"sparse {c['n']:.0e} × {c['p'] / 1e6:.1f}M, {2 * k} nnz/row"
        else:
            phi = f"dense {c['n']:.0e}×{c['p']}"
        rows.append(
            f"| {c['case']} | {phi.replace('1e+06', '10⁶')} | {c['greedy_seconds']:.1f} s | "
            f"{c['seconds_per_step'] * 1e3:.0f} ms | {c['kernel_evals_per_second'] / 1e6:.1f}M | "
            f"{c['step_gflops']:.1f} ({c['share_of_gemm']:.1%} of {c['gemm_gflops']:.0f}) | "
            f"{c['share_of_read_bound']:.0%} | {c['state_gb']:.1f} GB | {c['peak_rss_gib']:.1f} GiB |"
        )
    rows += [
        "",
        "| case | GreeDi / greedy reduction, m = 10 · 25 · 100 (worst of 2, 4, 8 parts) | "
        "stochastic greedy ε = 0.1 | matching pursuit | model fit, embedding |",
        "|---|---|---|---|---|",
    ]
    for c in r["cases"]:
        greedi = " · ".join(
            f"{min(c[f'greedi_m{m}_p{p}']['reduction_ratio'] for p in (2, 4, 8)):.3f}" for m in (10, 25, 100)
        )
        st, mp = c["stochastic_eps0.1"], c["matching_pursuit"]
        rows.append(
            f"| {c['case']} | {greedi} | {st['reduction_ratio']:.3f} ({st['seconds']:.1f} s) | "
            f"{mp['reduction_ratio']:.4f} ({mp['seconds']:.1f} s) | "
            f"{c['fit_seconds']:.0f} s, {c['embed_seconds']:.0f} s |"
        )
    return "\n".join(rows)


def amazon_sbq_table(name: str = "sbq") -> str:
    """``benchmarks/results/amazon/<name>.json``: explicit ratings (sbq) or the implicit reading
    (sbq_implicit, whose model may be the negatives run's)."""
    r = json.loads((RESULTS / "amazon" / f"{name}.json").read_text())
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
    for size, run in r.get("earlier", {}).items():
        rows += [
            "",
            f"Earlier, {run['note']}: {size} selected in {run['sbq']['stage_seconds']['select']:.1f} s, the flow "
            f"at {run['sbq']['peak_rss_mib']['flow']:,.0f} MiB, the workers at "
            f"{worker_peaks(run['sbq']['peak_rss_mib'])} MiB.",
        ]
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


def amazon_negatives_table() -> str:
    r = json.loads((RESULTS / "amazon" / "negatives.json").read_text())
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
    for name, run in r.get("earlier", {}).items():
        rows += [
            "",
            f"Earlier, {run['note']}: {name} took train {run['stage_seconds']['train']:.1f} s, the flow "
            f"{run['peak_rss_mib']['flow']:,.0f} MiB, the workers {worker_peaks(run['peak_rss_mib'])} MiB.",
        ]
    return "\n".join(rows)


def include(path: str, shift: int = 0):
    """A benchmark's own Markdown, headings moved ``shift`` levels down to fit the page."""

    def render() -> str:
        lines = (RESULTS / path).read_text().strip().splitlines()
        return "\n".join("#" * shift + line if line.startswith("#") else line for line in lines)

    return render


def concat(*parts):
    return lambda: "\n\n".join(p() for p in parts)


def case_deletion(*names: str):
    return concat(*(include(f"case_deletion/{n}.md") for n in names))


# page → marker → renderer: each table lives in exactly one page.
TABLES = {
    "model.md": {"lambda-table": lambda_table},
    "scaling.md": {
        "throughput-table": throughput_table,
        "als-vs-implicit-table": als_vs_implicit_table,
        "converged-fit-table": converged_fit_table,
        "heavy-items-table": heavy_items_table,
        "own-topn-table": own_topn_table,
        "scaling-table": include("scaling/scaling.md"),
    },
    "negatives.md": {
        "negatives-appc-table": include("negatives_appc.md"),
        "negatives-appc-sampled4-table": include("negatives_appc_sampled4.md"),
        "negatives-scan-table": negatives_scan_table,
        "amazon-negatives-table": amazon_negatives_table,
    },
    "prototypes.md": {
        "sbq-scale-table": sbq_scale_table,
        "amazon-sbq-table": amazon_sbq_table,
        "amazon-sbq-implicit-table": lambda: amazon_sbq_table("sbq_implicit"),
        "sbq-applications": include("sbq_applications.md", shift=2),
    },
    "faithfulness.md": {
        "case-deletion-sparse": case_deletion("breast-cancer", "digits-4v9", "synthetic-sparse"),
        "case-deletion-cf": case_deletion(
            "movielens-100k-sgd", "movielens-100k-als", "movielens-100k-softimpute", "movielens-100k-two-tower"
        ),
    },
}


def fill(text: str, tables: dict) -> str:
    """``text`` with each marker pair's content replaced by its rendered table."""
    for name, render in tables.items():
        start = f"<!-- {name} -->\n"
        a = text.index(start) + len(start)
        b = text.index(f"<!-- /{name} -->", a)
        text = text[:a] + render() + "\n" + text[b:]
    return text


def render_docs(docs: Path = DOCS) -> dict[Path, str]:
    """Every page that holds tables, as ``--docs`` would write it."""
    return {docs / page: fill((docs / page).read_text(), tables) for page, tables in TABLES.items()}


def write_docs(docs: Path = DOCS) -> None:
    for path, text in render_docs(docs).items():
        if path.read_text() != text:
            path.write_text(text)


if __name__ == "__main__":
    if "--docs" in sys.argv or "--readme" in sys.argv:
        write_docs()
    elif "--check" in sys.argv:
        stale = [str(p) for p, text in render_docs().items() if p.read_text() != text]
        print("\n".join(f"{p}: tables differ from benchmarks/results (run report.py --docs)" for p in stale))
        sys.exit(1 if stale else 0)
    else:
        for tables in TABLES.values():
            for render in tables.values():
                print(render(), end="\n\n")
