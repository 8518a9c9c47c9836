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
