"""The docs' tables of the GAMMLI area (docs/gammli.md), from ``benchmarks/results/gammli/``."""

from __future__ import annotations

import numpy as np

from benchmarks.common import markdown


def _ms(vals):
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    return f"{np.mean(vals):.4f} ± {np.std(vals):.4f}" if vals else "–"


# (header, [(part of the split, metric)], [paper keys], paper table) per task
COLUMNS = {
    "regression": (
        "| regression | warm+cold RMSE | MAE | warm RMSE | cold RMSE | paper Table 1 RMSE | paper Table 3 "
        "(cold) RMSE |",
        [("all", "rmse"), ("all", "mae"), ("warm", "rmse"), ("cold", "rmse")],
        [("paper_table1", "rmse"), ("paper_table3", "rmse")],
    ),
    "classification": (
        "| classification | AUC | log loss | cold AUC | cold log loss | paper AUC | paper log loss |",
        [("all", "auc"), ("all", "log_loss"), ("cold", "auc"), ("cold", "log_loss")],
        [("paper_table1", "auc"), ("paper_table1", "log_loss")],
    ),
}


def _task_table(data, runs, task) -> list[str]:
    header, cells, paper = COLUMNS[task]
    names = [k for k, v in runs[0][task].items() if isinstance(v, dict) and "all" in v]
    out = [header, "|---" * (len(cells) + len(paper) + 1) + "|"]
    for n in names:
        row = [_ms([r[task][n][part].get(k) for r in runs]) for part, k in cells]
        row += [str(data[t].get(n, {}).get(k, "–")) for t, k in paper]
        out.append(f"| {n} | " + " | ".join(row) + " |")
    return out


def scale_table(r: dict) -> str:
    """Seconds per stage of each size, their cost slope log(t₂/t₁)/log(N₂/N₁), and the peak RSS."""
    stages = ("parts", "stage1", "stage2", "grid", "refit_additive", "stage3", "total")
    body = []
    for run in r["runs"]:
        workers = ", ".join(f"{v:,.0f}" for v in run["peak_rss_mib"]["workers"].values())
        body.append(
            f"| {run['n'] / 1e6:.0f}M | "
            + " | ".join(f"{run['seconds'][st]:,.1f} s" for st in stages)
            + f" | {run['peak_rss_mib']['flow']:,.0f} | {workers} |"
        )
    for slopes in r["slopes"].values():
        body.append("| slope | " + " | ".join(f"{slopes[st]:.2f}" for st in stages) + " | | |")
    sweeps = r["runs"][0]["sweeps"] * (len(r["runs"][0]["backfit_sweeps"]) + 1)
    return markdown(
        f"| N | parts | stage 1 | stage 2 | grid (1 point) | refit | stage 3 ({sweeps} sweeps) | total | flow MiB | "
        "workers MiB |",
        body,
    )


def sim_tables(data: dict) -> str:
    """docs/gammli.md: eq. 6's simulation, GAMMLI and its peers, mean ± sd over seeds, and how often the true
    terms were kept (the kept terms and (K, L, λ) of each seed are in ``sim.json``)."""
    runs = data["runs"]
    out = [
        f"Seeds {[r['seed'] for r in runs]}, size {data['args']['size']}×{data['args']['size']}, "
        f"grid rounds {data['args']['grid_rounds']}; mean ± sd over seeds.\n"
    ]
    for task in ("regression", "classification"):
        if not all(task in r for r in runs):
            continue
        out += _task_table(data, runs, task)
        kept = [r[task]["GAMMLI_fit"] for r in runs]
        out.append(
            f"\nKept terms ({task}): every true main effect kept in "
            f"{sum(k['true_main_kept'] for k in kept)}/{len(kept)} seeds, both true interactions in "
            f"{sum(k['true_pairs_kept'] for k in kept)}/{len(kept)}.\n"
        )
    return "\n".join(out).rstrip("\n")


def ml100k_table(data: dict) -> str:
    """docs/gammli.md: warm and cold RMSE on ml-100k of GAMMLI, the plain MF, the baselines and peers."""
    out = [
        f"{data['n_train']} training ratings, {data['n_test']} test ratings of which {data['n_cold']} cold. "
        f"GAMMLI chose K={data['gammli']['K']}, L={data['gammli']['L']}, λ={data['gammli']['lam']:.3g}, "
        f"rank {data['gammli']['rank']} (the kept terms are in `ml100k.json`).\n",
        "| model | warm RMSE | warm MAE | cold RMSE | all RMSE | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for n, r in data["results"].items():
        out.append(
            f"| {n} | {r['warm']['rmse']:.4f} | {r['warm']['mae']:.4f} | {r['cold']['rmse']:.4f} | "
            f"{r['all']['rmse']:.4f} | {r['seconds']} |"
        )
    paper = ", ".join(f"{n} {v}" for n, v in data["paper_ml1m_rmse"].items())
    out.append(f"\nPaper (ml-1m, RMSE): {paper}.")
    return "\n".join(out)


def ml100k_splits_table(data: dict) -> str:
    """docs/gammli.md: warm and cold RMSE over seeded ml-100k splits, by mean cold RMSE, with GAMMLI's paired
    cold difference to each model."""
    models = sorted(data["models"].items(), key=lambda m: m[1]["cold"]["mean"])
    n = len(data["seeds"])
    seeds = f"{data['seeds'][0]}–{data['seeds'][-1]}"
    body = []
    for i, (name, m) in enumerate(models):
        same = [other for other, o in models[:i] if o["cold"]["per_split"] == m["cold"]["per_split"]]
        per_split = f"(= {same[0]}'s)" if same else ", ".join(f"{v:.4f}" for v in m["cold"]["per_split"])
        d = m.get("gammli_cold_minus_this")
        diff = (
            f"{d['mean']:.4f} ± {d['se']:.4f} | {d['gammli_lower_on']}/{d['splits']}".replace("-", "−")
            if d
            else "– | –"
        )
        body.append(
            f"| {name} | {m['warm']['mean']:.4f} | {m['cold']['mean']:.4f} ± {m['cold']['sd']:.4f} | {per_split} | "
            f"{diff} |"
        )
    return markdown(
        f"| model | warm RMSE (mean of {n}) | cold RMSE (mean ± sd of {n}) | cold RMSE per split (seeds {seeds}) | "
        "GAMMLI − model, cold (mean ± se) | GAMMLI lower on |",
        body,
    )
