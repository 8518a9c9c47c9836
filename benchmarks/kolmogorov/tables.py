"""The docs' tables of the Kolmogorov area (docs/kolmogorov.md), from ``benchmarks/results/kolmogorov/``."""

from benchmarks.common import markdown


def table4(r: dict) -> str:
    """docs/kolmogorov.md: Table 4, test RMSE in stars and the paper's NRMSE per D."""
    models = ("KM", "MF", "K-means", "NMF")
    rows = [
        "| D | " + " | ".join(f"{m} RMSE★ | {m} NRMSE" for m in models) + " | KM λ, μ |",
        "|---|" + "---|---|" * len(models) + "---|",
    ]
    for x in r["rows"]:
        cells = " | ".join(f"{x[m]['rmse_stars']:.4f} | {x[m]['nrmse_paper']:.4f}" for m in models)
        rows.append(f"| {x['D']} | {cells} | {x['KM']['lam']:g}, {x['KM']['mu']:g} |")
    return "\n".join(rows)


def rules(r: dict) -> str:
    """docs/kolmogorov.md: mined rules' held-out precision against random pairs of the same popularity."""
    rows = [
        "| D | rules | maximal items | held-out P(likes j \\| likes i): rules | random pairs | "
        "P(likes i \\| likes j): rules | random pairs |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        c = x["rule_check"]
        if not c.get("rules"):
            rows.append(f"| {x['D']} | 0 | {len(x['maximal_items'])} | | | | |")
            continue
        m, b = c["mined"], c["random_same_popularity"]
        rows.append(
            f"| {x['D']} | {c['rules']} | {len(x['maximal_items'])} | {m['precision_i_to_j']:.3f} | "
            f"{b['precision_i_to_j']:.3f} | {m['precision_j_to_i']:.3f} | {b['precision_j_to_i']:.3f} |"
        )
    return "\n".join(rows)


def table3(r: dict) -> str:
    """docs/kolmogorov.md: Table 3, SDR's error rate against exhaustive search per D."""

    def fmt(v):
        return " ".join(f"{t:.4f}" for t in v)

    return markdown(
        "| D | item ψ-steps | SDR rounded alone (×10⁻³) | ψ-step output (×10⁻³) | paper (×10⁻³) | "
        "train RMSE SDR per iteration | exhaustive | monotone |",
        [
            f"| {x['D']} | {x['item_steps']} | {1e3 * x['error_rate_rounded']:.2f} | "
            f"{1e3 * x['error_rate_psi_step']:.2f} | {r['paper_error_rate_x1e3'][str(x['D'])]} | "
            f"{fmt(x['rmse_sdr_mean'])} | {fmt(x['rmse_exhaustive_mean'])} | {x['monotone']} |"
            for x in r["rows"]
        ],
    )


def fw_steps(r: dict) -> str:
    """docs/kolmogorov.md: the θ-step's gap f(θ) − f* after k Frank–Wolfe iterations per step rule, mean / max
    over users (a gap below 1e-12 is rounding)."""
    names = {
        "simple": "simple α = 2/(k+2) (Table 1)",
        "exact": "exact line search",
        "pairwise": "pairwise + exact line search (default)",
    }
    ks = sorted({x["iterations"] for x in r["rows"]})

    def gap(x):
        if x["max_gap"] < 1e-12:
            return "< 1e-12"
        return " / ".join(f"{g:.2g}" if g >= 0.01 else short_e(g) for g in (x["mean_gap"], x["max_gap"]))

    cells = {(x["step"], x["iterations"]): gap(x) for x in r["rows"]}
    return markdown(
        "| step | " + " | ".join(f"k = {k}" for k in ks) + " |",
        [f"| {name} | " + " | ".join(cells[step, k] for k in ks) + " |" for step, name in names.items()],
    )


def psi_throughput(r: dict) -> str:
    """docs/kolmogorov.md: the batched ψ-step's items per second per core against cvxpy + Clarabel per item."""
    local = f"{r['local_items_per_s_per_core']:,.0f} ({r['local_seconds']:.0f} s)"
    speedup = (
        f"**{r['speedup_local_vs_cvxpy']:.1f}×** ({r['speedup_local_vs_cvxpy_tight']:.1f}× against the tight Clarabel)"
    )
    per_core, n = r["cluster_items_per_s_per_core"], len(r["cluster_peak_rss_mib"]["workers"])
    return markdown(
        "| | items/s per core | vs cvxpy + Clarabel per item |",
        [
            "| cvxpy + Clarabel, per item (SDP only), Clarabel's defaults | "
            f"{r['cvxpy_default_items_per_s']:.1f} | 1× |",
            "| cvxpy + Clarabel, per item, gap and feasibility tolerances 1e-12 | "
            f"{r['cvxpy_tight_items_per_s']:.1f} | |",
            "| batched ψ-step as the fit runs it (SDP certified to 1e-7, rounding, flip search), one process | "
            f"{local} | {speedup} |",
            f"| the fit's ψ-step on a {n}-worker LocalCluster | {per_core:,.0f} per core, {n * per_core:,.0f} in all "
            f"({r['cluster_seconds']:.1f} s) | |",
        ],
    )


def scale(*runs: dict) -> str:
    """docs/kolmogorov.md: a full fit on synthetic interactions per size, wall time, objective, rules and memory."""

    def row(r):
        fit = f"{r['fit_seconds']:,.0f} s" + (f" ({r['fit_seconds'] / 60:.1f} min)" if r["fit_seconds"] >= 600 else "")
        e = " → ".join(f"{v:,.0f}" for v in r["train_objective"])
        mantissa, exponent = f"{r['rules_total']:.1e}".split("e")
        workers = " and ".join(f"{v:,.0f}" for v in r["peak_rss_mib"]["workers"].values())
        return (
            f"| {r['interactions']:,} | {r['users']:,} | {r['items']:,} | {fit} | {e} | {r['rules_written']:,} "
            f"({mantissa}·10{superscript(int(exponent))}) | {r['peak_rss_mib']['flow']:,.0f} MiB | "
            f"{workers} MiB |"
        )

    iterations = " → ".join(str(i + 1) for i in range(len(runs[0]["train_objective"])))
    return markdown(
        f"| interactions | users | items | fit | E after iteration {iterations} | rules written (of) | flow peak | "
        "worker peaks |",
        [row(r) for r in runs],
    )


def superscript(n: int) -> str:
    """``n`` in superscript digits (10¹⁰)."""
    return str(n).translate(str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻"))


def short_e(x: float) -> str:
    """``x`` as 2.4e-3 (one decimal, no padded exponent)."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"
