"""The docs' tables of the prototypes (SBQ) area, from ``benchmarks/results/prototypes/``."""

from __future__ import annotations

from benchmarks.common import include, markdown


def phi_shape(c: dict) -> str:
    """Φ of a case: a sparse MF embedding (its nonzeros per row) or a dense logistic one."""
    if c["case"] == "mf":
        k = c["p"] // (c["users"] + c["items"])
        phi = f"sparse {c['n']:.0e} × {c['p'] / 1e6:.1f}M, {2 * k} nnz/row"
    else:
        phi = f"dense {c['n']:.0e}×{c['p']}"
    return phi.replace("1e+06", "10⁶")


def scale_table(r: dict) -> str:
    """docs/prototypes.md: greedy SBQ at 10⁶ candidates, and GreeDi and the others against greedy."""
    greedy = markdown(
        "| case | Φ | greedy, 100 steps | per step | kernel evals/s | GFLOP/s (share of GEMM) | share of read bound | "
        "L⁻¹k state | peak RSS |",
        [
            f"| {c['case']} | {phi_shape(c)} | {c['greedy_seconds']:.1f} s | "
            f"{c['seconds_per_step'] * 1e3:.0f} ms | {c['kernel_evals_per_second'] / 1e6:.1f}M | "
            f"{c['step_gflops']:.1f} ({c['share_of_gemm']:.1%} of {c['gemm_gflops']:.0f}) | "
            f"{c['share_of_read_bound']:.0%} | {c['state_gb']:.1f} GB | {c['peak_rss_gib']:.1f} GiB |"
            for c in r["cases"]
        ],
    )
    rows = [
        greedy,
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


applications_table = include("prototypes/applications.md", shift=2)
