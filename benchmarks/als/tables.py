"""The docs' tables of the ALS area, from ``benchmarks/results/als/``."""

from __future__ import annotations

from benchmarks.common import markdown


def lambda_table(r: dict) -> str:
    """docs/model.md: validation and test RMSE per λ of the grid, beside the global mean and the biases."""
    n = r["train"]
    rows = [
        "| model | λ | ridge λ\\|D\\|/2 | validation RMSE | test RMSE | ‖∇f‖ at stop | effective rank | fit (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows.append(f"| global mean | | | {r['global_mean']['val_rmse']:.4f} | {r['global_mean']['test_rmse']:.4f} | | | |")
    b = r["user_item_biases"]
    rows.append(f"| user + item biases (reg {b['reg']}) | | | {b['val_rmse']:.4f} | {b['test_rmse']:.4f} | | | |")
    for g in r["grid"]:
        mark = " **(default λ)**" if g["lam"] == r["chosen"]["lam"] else ""
        rows.append(
            f"| ALS-MF k={r['k']}{mark} | {g['lam']:g} | {g['lam'] * n / 2:.1f} | {g['val_rmse']:.4f} | "
            f"{g['test_rmse']:.4f} | {g['grad_norm']:.1e} | {g['effective_rank']} | {g['seconds']} |"
        )
    return "\n".join(rows)


def vs_implicit_table(res: dict) -> str:
    """docs/scaling.md: seconds per ALS sweep, dxplain's trainer and exact kernels against implicit."""
    header = (
        f"| data set | users × items | ratings | k | trainer s/sweep | "
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


def blas_threads_table(r: dict) -> str:
    """docs/scaling.md: in-process fits with BLAS on one thread beside numba's loops, and with BLAS's own pool."""
    fits = ", ".join(f"{f['model']} {f['one_blas_thread_s']:.1f} · {f['blas_pool_s']:.1f}" for f in r["fits"])
    return (
        f"`python -m benchmarks.als.blas_threads` ({r['dataset']}, in process), s with BLAS on one thread beside "
        f"numba (`models.threads`) · with BLAS's pool: {fits}."
    )


def newton_passes_table(r: dict) -> str:
    """docs/scaling.md: the Newton polish's passes, compiled against their numpy references."""
    c, ref = r["compiled"], r["reference"]
    names = {
        "hessian_product_s": "Hessian product",
        "curvature_blocks_s": "curvature blocks",
        "preconditioner_factor_s": "preconditioner factor",
        "preconditioner_apply_s": "apply",
    }
    parts = ", ".join(f"{name} {c[key]:.2f} · {ref[key]:.2f}" for key, name in names.items())
    return (
        f"`python -m benchmarks.als.newton_passes` ({r['data']}, k = {r['k']}, in process), s compiled · numpy "
        f"reference: {parts}."
    )


def converged_fit_table(r: dict) -> str:
    """docs/scaling.md: time to a fit at each identity tolerance against implicit's 15 iterations."""
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


def converged_ratings_table(r: dict) -> str:
    """docs/scaling.md: the refresh's ratings models on ml-100k, trained to the refresh's rule, against implicit."""
    header = (
        f"| ml-100k, k = {r['k']}, --tol {r['tol']:g} | sweeps + Newton steps | fit s | implicit 15 it. s | ratio "
        "(target ≤ 10×) | mean of seeds | measured max item · user |"
    )
    return markdown(
        header,
        [
            f"| {f['model']} | {f['sweeps']} + {f['newton_steps']} | {f['seconds']:.2f} | "
            f"{r['implicit_fit_median_s']:.2f} | **{f['over_implicit']:.1f}×** | {_seeds(f)} | "
            f"{f['identity']['item']['max']:.0e} · {f['identity']['user']['max']:.0e} |"
            for f in r["fits"]
        ],
    )


def _seeds(f: dict) -> str:
    if "seeds" not in f:
        return "–"
    return f"{f['mean_over_implicit']:.1f}× ({len(f['seeds']) + 1})"


def import_refresh_table(r: dict) -> str:
    """docs/model.md: an implicit-trained model imported by each route and explained by a refresh."""
    header = (
        f"| implicit's 15 iterations ({r['implicit_fit_s']:.2f} s), then | import s | refresh s "
        "| users' top-20 changed | fidelity max item · user |"
    )

    def row(x: dict) -> str:
        imp, fid = x["import"], x["fidelity_max_rel_error"]
        how = f"polish ({imp['sweeps']} sweeps)" if x["route"] == "polish" else "re-solve U"
        changed = imp.get("users_top20_changed", "")
        return (
            f"| {how} | {x['import_command_s']:.1f} | {x['refresh_command_s']:.1f} | {changed} | "
            f"{fid['item']:.0e} · {fid['user']:.0e} |"
        )

    return markdown(header, [row(x) for x in r["routes"]])


def biased_table(r: dict) -> str:
    """docs/model.md: biased MF against the bias baseline, the plain default and surprise's SVD on ml-100k."""
    rows, names = (
        r["rows"],
        {
            "biases": "user + item biases (reg {reg})",
            "plain_mf": "dxplain ALS-MF k={k} (its defaults, nothing chosen)",
            "biased_mf": "dxplain biased MF k={k}, ridges {ridge:g} · {bias_ridge:g} (chosen)",
            "surprise_svd": "surprise {version} SVD (its defaults)",
        },
    )
    body = []
    for key, name in names.items():
        x = rows[key]
        chosen = f"{x['val_rmse']:.4f}" if "val_rmse" in x else ""
        body.append(
            f"| {name.format(**x)} | {chosen} | {x['test_rmse']:.4f} | {x['test_rmse_clipped']:.4f} | "
            f"{x['fit_seconds']:.2f} |"
        )
    return markdown("| model | validation RMSE | test RMSE | test RMSE, clipped to 1–5 | fit (s) |", body)


def biased_parts_table(r: dict) -> str:
    """docs/model.md: biased MF trained in this process and over the partitioned interactions on ml-100k."""
    names = {"in_process": "in this process (`BiasedHalfSteps`)", "parts_local_mapper": "over parts, `LocalMapper`"}
    dask = [k for k in r if k.startswith("parts_dask")]
    names.update({k: f"over parts, Dask, {k.split('_')[2]} workers × 1 thread" for k in dask})

    def versus(x: dict) -> str:
        return f"{x['factors_max_rel_diff']:.0e} | {x['predictions_max_abs_diff']:.0e}"

    body = [
        f"| {name} | {r[key]['sweeps']} | {r[key]['newton_steps']} | {r[key]['seconds']:.1f} | "
        f"{max(r[key]['miss_bound'].values()):.1e} | {'(the reference) |' if key == 'in_process' else versus(r[key])} |"
        for key, name in names.items()
    ]
    return markdown(
        f"| fit ({r['parts']['user']} · {r['parts']['item']} parts) | sweeps | Newton steps | fit (s) | miss bound | "
        "factors vs in-process (rel.) | predictions vs in-process |",
        body,
    )


def _settings(m: dict) -> str:
    c = m["chosen"]
    if "ridge" in c:
        return f"λ\\|D\\| {c['ridge']:g}"
    if "lr" in c:
        return f"lr {c['lr']:g}, reg {c['reg']:g}"
    return f"λ {c['lam']:g}, α {c['alpha']:g}"


def ials_seeds_table(r: dict) -> str:
    """docs/model.md: iALS against implicit's ALS, test recall per seeded split of ml-100k binarised."""

    def chosen(m):
        return f"{m['chosen']['lam']:g}, {m['chosen']['alpha']:g}"

    rows = markdown(
        f"| seed | λ, α: implicit · dxplain | test recall@{r['n']}: implicit · dxplain | ratio |",
        [
            f"| {s['seed']} | {chosen(s['implicit'])} · {chosen(s['dxplain'])} | {s['implicit']['test_recall']:.4f} · "
            f"{s['dxplain']['test_recall']:.4f} | {s['ratio']:.4f}× |"
            for s in r["splits"]
        ],
    )
    n = len(r["splits"])
    return (
        f"{rows}\n\nMean over {n} splits **{r['mean_ratio']:.4f}×** (lowest {r['min_ratio']:.4f}×; "
        f"{r['splits_at_target']} of {n} at ≥ {r['target']:g}×)."
    )


def _random_start(s: dict) -> str:
    if "random_start_s" not in s:
        return "–"
    done = "" if s["random_start_converged"] else ", not converged"
    return f"{s['random_start_s']:.2f} ({s['random_start_sweeps']}{done})"


def ials_vs_implicit_table(r: dict) -> str:
    """docs/model.md: iALS against implicit on ml-100k binarised: quality, speed, explanations, the import routes."""
    q, acc = r["quality"], r["quality"]["acceptance"]
    quality = markdown(
        f"| k = {r['k']} | chosen on validation | test recall@{r['n']} | NDCG@{r['n']} | fit s |",
        [
            f"| {m['model']} | {_settings(m)} | {m['test_recall']:.4f} | {m['test_ndcg']:.4f} | "
            f"{m['fit_seconds']:.2f} |"
            for m in q["models"]
        ],
    )
    speed = markdown(
        f"| data | λ, α | k | implicit 15 it. s | dxplain to ε ≤ {r['speed']['tol']:g} s (sweeps) | ratio | "
        "random start s (sweeps) |",
        [
            f"| {s['dataset'].split()[0]} ({s['interactions']:,}) | {s.get('lam', 0.01):g}, {s.get('alpha', 1.0):g} | "
            f"{s['k']} | {s['implicit_median_s']:.2f} | {s['dxplain_median_s']:.2f} ({s['sweeps']}) | "
            f"**{s['ratio']:.1f}×** | {_random_start(s)} |"
            for s in r["speed"]["rows"]
        ],
    )
    explain = markdown(
        "| iALS at | top-10 overlap | Spearman | score drop without top 5: implicit · dxplain · random |",
        [
            f"| {e['setting']} (λ {e['lam']:g}, α {e['alpha']:g}) | {e['overlap10_mean']:.2f} | "
            f"{e['spearman_mean']:.2f} | {e['drop_implicit_mean']:.3f} · {e['drop_dxplain_mean']:.3f} · "
            f"{e['drop_random_mean']:.3f} |"
            for e in r["explanation"]
        ],
    )
    verdict = (
        f"dxplain's implicit model by validation: {acc['dxplain_model']}, test recall "
        f"**{acc['recall_ratio']:.4f}×** implicit ALS's (target ≥ {acc['target']:g}×: "
        f"{'met' if acc['passed'] else 'not met'})."
    )
    return "\n\n".join([quality, verdict, speed, explain])  # the import routes: import_refresh_table
