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
        "| D | ASIPair s/pair | RAIPair s/pair | M | H |",
        "|---|---|---|---|---|",
    ]
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
    """docs/pairwise.md: Fig. 1's test AUC after masking the top p% of features, per set; the p that mask the
    same number of features give the same AUCs, so they share a row."""
    out = []
    for name, s in r["sets"].items():
        methods = [m for m in ("asipair", "raipair", "shap_kernel", "shap_permutation", "random") if m in s["curve"][0]]
        lower = s["lower_than_random_at_every_p_ge_5pct"]
        beats = "every method" if all(lower.values()) else ", ".join(f"{m} {ok}" for m, ok in lower.items())
        secs = ", ".join(f"{m} {t:.3f}" for m, t in s["seconds_per_pair"].items())
        out.append(
            f"**{name}** (D = {s['D']}, test AUC {s['auc'][0]:.3f} ± {s['auc'][1]:.3f}; lower than random at "
            f"every p ≥ 5%: {beats}; seconds per pair: {secs})"
        )
        out.append("")
        out.append("| p | masked | " + " | ".join(methods) + " |")
        out.append("|---|---|" + "---|" * len(methods))
        rows: list[tuple[list[float], int, str]] = []
        for row in s["curve"]:
            cells = " | ".join(f"{row[m]:.3f} ± {row[m + '_ci95']:.3f}" for m in methods)
            if rows and rows[-1][1:] == (row["masked"], cells):
                rows[-1][0].append(row["p"])
            else:
                rows.append(([row["p"]], row["masked"], cells))
        for ps, masked, cells in rows:
            p = f"{ps[0]:g}" if len(ps) == 1 else f"{ps[0]:g}–{ps[-1]:g}"
            out.append(f"| {p} | {masked} | {cells} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def rai_vs_asi_table(r: dict) -> str:
    """docs/pairwise.md: RAIPair's median error and top-10% overlap against ASIPair over H and M, one row per set
    and M (the pooled errors stay in the JSON)."""
    out = [
        f"Median relative ℓ2 error ‖φ̃ − φ‖/‖φ‖ of RAIPair against ASIPair / mean top-10% overlap, {r['pairs']} "
        f"pairs (seed {r['seed']}); beside each set, its D and default M, H:",
        "",
        "| set | M | " + " | ".join(f"H = {h}" for h in r["H"]) + " |",
        "|---|---|" + "---|" * len(r["H"]),
    ]
    for name, s in r["sets"].items():
        d = f"first {s['D']} features" if s["cut_to_first_features"] else f"D = {s['D']}"
        label = f"{name} ({d}; {s['default_M']}, {s['default_H']})"
        for M in sorted({g["M"] for g in s["grid"]}):
            cells = {g["H"]: g for g in s["grid"] if g["M"] == M}
            row = " | ".join(
                f"{cells[h].get('rel_l2_error_median', float('nan')):.2f} / {cells[h]['top10_overlap']:.2f}"
                for h in r["H"]
            )
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
