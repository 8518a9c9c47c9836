"""The docs' tables of the pairwise area (docs/pairwise.md), from ``benchmarks/results/pairwise/``."""


def speed_table(r: dict) -> str:
    """docs/pairwise.md: Fig. 2's seconds per pair against D, and vectorised ASIPair against a loop."""
    v = r["vectorised"]
    runs = "; ".join(
        f"{x['vectorised_s']:.3f} s vs {x['loop_s']:.3f} s per pair, **{x['speedup']:.1f}×**, at {x['reference']} "
        "reference rows"
        for x in v
    )
    lines = [
        f"Vectorised ASIPair vs a per-coalition Python loop at D = {v[0]['D']} (same kernels, one coalition per "
        f"call): {runs} (max |Δφ| = {max(x['max_abs_difference'] for x in v):.1e}).",
        "",
        "| D | " + " | ".join(str(row["D"]) for row in r["rows"]) + " |",
        "|---|" + "---|" * len(r["rows"]),
        "| ASIPair s | "
        + " | ".join(f"{row['asipair_s']:.4f}" if row["asipair_s"] is not None else "—" for row in r["rows"])
        + " |",
        "| RAIPair s | " + " | ".join(f"{row['raipair_s']:.4f}" for row in r["rows"]) + " |",
        "| M, H | " + " | ".join(f"{row['M']}, {row['H']}" for row in r["rows"]) + " |",
    ]
    lines += [
        "",
        f"RAIPair log-log slope of seconds on D: {r['raipair_slope_all']:.2f} over all D, "
        f"{r['raipair_slope_D_ge_16']:.2f} for D ≥ 16. ASIPair: ×{2 ** r['asipair_log2_growth_per_feature']:.2f} "
        "per added feature (D = 2–9).",
    ]
    return "\n".join(lines)


def masking_table(r: dict) -> str:
    """docs/pairwise.md: Fig. 1 in one table: per set, each method's test AUC after masking, averaged over
    p ≥ 5% (the per-p curves are in masking.json and the figure)."""
    methods = ["asipair", "raipair", "shap_kernel", "shap_permutation", "random"]
    lines = [
        "Test AUC after masking each pair's top features, mean over p ≥ 5% (± mean 95% interval over seeds; "
        "lower is better); seconds per pair in brackets:",
        "",
        "| set | D | test AUC | " + " | ".join(methods) + " |",
        "|---|---|---|" + "---|" * len(methods),
    ]
    for name, s in r["sets"].items():
        rows = [row for row in s["curve"] if row["p"] >= 0.05]
        cells = []
        for m in methods:
            if m not in rows[0]:
                cells.append("—")
                continue
            mean = sum(row[m] for row in rows) / len(rows)
            ci = sum(row[m + "_ci95"] for row in rows) / len(rows)
            secs = s["seconds_per_pair"].get(m)
            cells.append(f"{mean:.3f} ± {ci:.3f}" + (f" [{secs:.3f}]" if secs is not None else ""))
        lines.append(f"| {name} | {s['D']} | {s['auc'][0]:.3f} ± {s['auc'][1]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rai_vs_asi_table(r: dict) -> str:
    """docs/pairwise.md: RAIPair's median error against ASIPair over H at the default M and at M = D (the
    other M, the top-10% overlaps and the pooled errors stay in the JSON)."""
    out = [
        f"Median relative ℓ2 error ‖φ̃ − φ‖/‖φ‖ of RAIPair against ASIPair, {r['pairs']} "
        f"pairs (seed {r['seed']}); beside each set, its D and default M, H:",
        "",
        "| set | M | " + " | ".join(f"H = {h}" for h in r["H"]) + " |",
        "|---|---|" + "---|" * len(r["H"]),
    ]
    for name, s in r["sets"].items():
        d = f"first {s['D']} features" if s["cut_to_first_features"] else f"D = {s['D']}"
        label = f"{name} ({d}; {s['default_M']}, {s['default_H']})"
        for M in sorted({s["default_M"], max(g["M"] for g in s["grid"])}):  # the default M and M = D
            cells = {g["H"]: g for g in s["grid"] if g["M"] == M}
            row = " | ".join(f"{cells[h].get('rel_l2_error_median', float('nan')):.2f}" for h in r["H"])
            out.append(f"| {label} | {M} | {row} |")
            label = ""
    return "\n".join(out)


def cluster_table(r: dict) -> str:
    """docs/pairwise.md: 10⁴ pairs on the 2-worker cluster against shap's KernelExplainer."""
    workers = " and ".join(f"{v:.0f}" for v in r["peak_rss_mib"]["workers"].values())
    return (
        f"{r['pairs']:,} Ionosphere pairs (D = {r['D']}, M = {r['M']}, H = {r['H']}) with RAIPair on a 2-worker "
        f"LocalCluster: {r['cluster_seconds']:.0f} s, **{r['cluster_pairs_per_s']:.1f} pairs/s** "
        f"(one process: {r['local_pairs_per_s']:.1f} pairs/s on {r['local_sample']} pairs, bit-identical to the "
        f"cluster's: {r['same_as_cluster_on_sample']}). shap KernelExplainer on {r['shap_kernel_sample']} of the "
        f"same pairs: **{r['shap_kernel_pairs_per_s']:.1f} pairs/s**. Peak RSS: flow "
        f"{r['peak_rss_mib']['flow']:.0f} MiB, workers {workers} MiB."
    )


def digits_table(r: dict) -> str:
    """docs/pairwise.md: Figs. 3–4 on the 8×8 digits, seconds and sparsity per pair."""
    secs = ", ".join(f"{p['seconds']:.2f}" for p in r["pairs"])
    nz = ", ".join(f"{p['nonzero_deviation_share']:.2f}" for p in r["pairs"])
    return (
        f"8×8 digits 1 vs 9 (D = {r['D']}, test AUC {r['test_auc']:.3f}); RAIPair on {len(r['pairs'])} pairs: "
        f"{secs} s each; share of non-zero deviations φ̂: {nz} (the pictures are Figs. 3–4 above)."
    )


def quality_table(r: dict) -> str:
    """docs/pairwise.md: each model's test AUC against a logistic regression's on the same split, RAIPair's
    efficiency and cost, and the masking curve's mean over p ≥ 5% for RAIPair and its baselines."""
    names = [m for m in ("raipair", "permutation", "shap_kernel", "random") if m in r["rows"][0]["masked_auc"]]
    lines = [
        f"{r['pairs']} pairs per row (seed {r['seed']}, {r['reference_rows']}-row sample, one core). *LR*: the "
        "logistic baseline's AUC; *eff.*: max |Σφ − (ζ − base)|/|ζ − base|; last columns: test AUC after "
        "masking each pair's top features by that ranking, mean over p ≥ 5% (**bold**: below random).",
        "",
        "| set | D | model | AUC | LR | ratio | s/pair | eff. | " + " | ".join(names) + " |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(names),
    ]
    for row in r["rows"]:
        m = row["masked_auc"]
        cells = [f"{m[n]:.3f}" for n in names]
        if m["raipair"] < m["random"]:
            cells[0] = f"**{cells[0]}**"
        lines.append(
            f"| {row['set']} | {row['D']} | {row['model']} | {row['auc']:.3f} | "
            f"{row['auc_logistic']:.3f} | {row['ratio']:.3f} | {row['raipair_s_per_pair']:.3f} | "
            f"{row['max_relative_efficiency_error']:.0e} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def reference_table(r: dict) -> str:
    """docs/pairwise.md: RAIPair at D = 57 with a reference sample: speed on 2 cores and the sample's error."""
    full = r["full_other_draws"]
    lines = [
        f"D = {r['D']} (M = {r['M']}, H = {r['H']}), {r['reference_full']:,} training rows, {r['pairs']} pairs: "
        f"**{r['cluster_s_per_pair']:.3f} s a pair** on {r['cluster_workers']} workers with the "
        f"{r['reference_rows']}-row sample ({r['local_s_per_pair']:.3f} s on one core; same φ: "
        f"{r['same_as_cluster']}; efficiency {r['max_relative_efficiency_error']:.0e}). A sample against every "
        f"row, same draws, {r['error_pairs']} pairs:",
        "",
        "| reference rows | s/pair | median ‖φ − φ_all‖/‖φ_all‖ | 90th pct | top-5 overlap |",
        "|---|---|---|---|---|",
    ]
    for s in r["sizes"]:
        lines.append(
            f"| {s['rows']:,} | {s['s_per_pair']:.3f} | {s['median_rel_error']:.2f} | {s['p90_rel_error']:.2f} | "
            f"{s['top5_overlap']:.2f} |"
        )
    lines.append(
        f"| all rows, other draws | | {full['median_rel_error']:.2f} | {full['p90_rel_error']:.2f} | "
        f"{full['top5_overlap']:.2f} |"
    )
    return "\n".join(lines)
