"""The docs' tables of the pairwise area (docs/pairwise.md), from ``benchmarks/results/pairwise/``."""


def speed_table(r: dict) -> str:
    """docs/pairwise.md: Fig. 2's seconds per pair against D, and vectorised ASIPair against a loop."""
    lines = [
        f"Vectorised ASIPair vs a per-coalition Python loop at D = {v['D']}, reference {v['reference']} rows "
        f"(same kernels, one coalition per call): {v['vectorised_s']:.3f} s vs {v['loop_s']:.3f} s per pair, "
        f"**{v['speedup']:.1f}×** (max |Δφ| = {v['max_abs_difference']:.1e})."
        for v in r["vectorised"]
    ]
    lines.append("")
    lines += ["| D | ASIPair s/pair | RAIPair s/pair | M | H |", "|---|---|---|---|---|"]
    for row in r["rows"]:
        a = f"{row['asipair_s']:.4f}" if row["asipair_s"] is not None else "—"
        lines.append(f"| {row['D']} | {a} | {row['raipair_s']:.4f} | {row['M']} | {row['H']} |")
    lines += [
        "",
        f"RAIPair log-log slope of seconds on D: {r['raipair_slope_all']:.2f} over all D, "
        f"{r['raipair_slope_D_ge_16']:.2f} for D ≥ 16. ASIPair: ×{2 ** r['asipair_log2_growth_per_feature']:.2f} "
        "per added feature (D = 2–9).",
    ]
    return "\n".join(lines)


def masking_table(r: dict) -> str:
    """docs/pairwise.md: Fig. 1's test AUC after masking the top p% of features, per set."""
    out = []
    for name, s in r["sets"].items():
        methods = [m for m in ("asipair", "raipair", "shap_kernel", "shap_permutation", "random") if m in s["curve"][0]]
        beats = ", ".join(f"{m} {ok}" for m, ok in s["lower_than_random_at_every_p_ge_5pct"].items())
        secs = ", ".join(f"{m} {t:.3f}" for m, t in s["seconds_per_pair"].items())
        out.append(
            f"**{name}** (D = {s['D']}, test AUC {s['auc'][0]:.3f} ± {s['auc'][1]:.3f}; lower than random at "
            f"every p ≥ 5%: {beats}; seconds per pair: {secs})"
        )
        out.append("")
        out.append("| p | masked | " + " | ".join(methods) + " |")
        out.append("|---|---|" + "---|" * len(methods))
        for row in s["curve"]:
            out.append(
                f"| {row['p']:g} | {row['masked']} | "
                + " | ".join(f"{row[m]:.3f} ± {row[m + '_ci95']:.3f}" for m in methods)
                + " |"
            )
        out.append("")
    return "\n".join(out)


def rai_vs_asi_table(r: dict) -> str:
    """docs/pairwise.md: RAIPair's error and top-10% overlap against ASIPair over H and M."""
    out = []
    for name, s in r["sets"].items():
        cut = f", first {s['cut_to_first_features']} features" if s["cut_to_first_features"] else ""
        out.append(
            f"**{name}** (D = {s['D']}{cut}; default M = {s['default_M']}, H = {s['default_H']}; "
            f"top-10% = {s['top_k']} features): median relative ℓ2 error / pooled (Σ‖φ̃ − φ‖ / Σ‖φ‖) / "
            "mean top-10% overlap"
        )
        out.append("")
        Ms = sorted({g["M"] for g in s["grid"]})
        out.append("| M \\ H | " + " | ".join(str(h) for h in r["H"]) + " |")
        out.append("|---|" + "---|" * len(r["H"]))
        for M in Ms:
            cells = {g["H"]: g for g in s["grid"] if g["M"] == M}
            out.append(
                f"| {M} | "
                + " | ".join(
                    f"{cells[h].get('rel_l2_error_median', float('nan')):.2f} / "
                    f"{cells[h].get('pooled_rel_l2_error', float('nan')):.2f} / {cells[h]['top10_overlap']:.2f}"
                    for h in r["H"]
                )
                + " |"
            )
        out.append("")
    return "\n".join(out)


def cluster_local_table(r: dict) -> str:
    """docs/pairwise.md: RAIPair in one process against shap, pairs per second."""
    return (
        f"In one process (no cluster; the heavy lock was held when this ran): RAIPair on {r['local_sample']} "
        f"Ionosphere pairs (D = {r['D']}, M = {r['M']}, H = {r['H']}): **{r['local_pairs_per_s']:.1f} pairs/s**; "
        f"shap KernelExplainer on {r['shap_kernel_sample']} of the same pairs: "
        f"**{r['shap_kernel_pairs_per_s']:.1f} pairs/s**."
    )


def cluster_table(r: dict) -> str:
    """docs/pairwise.md: 10⁴ pairs on the 2-worker cluster against shap's KernelExplainer."""
    return (
        f"{r['pairs']:,} Ionosphere pairs (D = {r['D']}, M = {r['M']}, H = {r['H']}) with RAIPair on a 2-worker "
        f"LocalCluster: {r['cluster_seconds']:.0f} s, **{r['cluster_pairs_per_s']:.1f} pairs/s** "
        f"(one process: {r['local_pairs_per_s']:.1f} pairs/s on {r['local_sample']} pairs, bit-identical to the "
        f"cluster's: {r['same_as_cluster_on_sample']}). shap KernelExplainer on {r['shap_kernel_sample']} of the "
        f"same pairs: **{r['shap_kernel_pairs_per_s']:.1f} pairs/s**. Peak RSS (MiB): {r['peak_rss_mib']}."
    )


def digits_table(r: dict) -> str:
    """docs/pairwise.md: Figs. 3–4 on the 8×8 digits, seconds and sparsity per pair."""
    secs = ", ".join(f"{p['seconds']:.2f}" for p in r["pairs"])
    nz = ", ".join(f"{p['nonzero_deviation_share']:.2f}" for p in r["pairs"])
    return (
        f"8×8 digits 1 vs 9 (D = {r['D']}, test AUC {r['test_auc']:.3f}); RAIPair on {len(r['pairs'])} pairs: "
        f"{secs} s each; share of non-zero deviations φ̂: {nz}. Picture: `benchmarks/results/pairwise/digits.png`."
    )
