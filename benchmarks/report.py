"""Render the README's benchmark tables from benchmarks/results/*.json (no figure is typed by hand).

    python benchmarks/report.py            # print the tables
    python benchmarks/report.py --readme   # rewrite them between the README's markers
"""

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def lambda_table() -> str:
    r = json.loads((RESULTS / "select_lambda.json").read_text())
    n = r["train"]
    rows = ["| model | λ | ridge λ\\|D\\|/2 | validation RMSE | test RMSE | ‖∇f‖ at stop | effective rank | fit (s) |",
            "|---|---|---|---|---|---|---|---|"]
    rows.append(f"| global mean | | | {r['global_mean']['val_rmse']:.4f} | {r['global_mean']['test_rmse']:.4f} | | | |")
    b = r["user_item_biases"]
    rows.append(f"| user + item biases (reg {b['reg']}) | | | {b['val_rmse']:.4f} | {b['test_rmse']:.4f} | | | |")
    for g in r["grid"]:
        mark = " **(default)**" if g["lam"] == r["chosen"]["lam"] else ""
        rows.append(f"| ALS-MF k={r['k']}{mark} | {g['lam']:g} | {g['lam'] * n / 2:.1f} | {g['val_rmse']:.4f} | "
                    f"{g['test_rmse']:.4f} | {g['grad_norm']:.1e} | {g['effective_rank']} | {g['seconds']} |")
    return "\n".join(rows)


def throughput_table() -> str:
    rows = ["| data set | \\|D\\| | users × top-10 targets | scored pairs | batched pairs/s | per-pair loop pairs/s | "
            "speed-up | batched GFLOP/s | same-shape matmul GFLOP/s | share | 4096² GEMM GFLOP/s | share |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ("movielens-100k", "synthetic-5m"):
        f = RESULTS / f"explain_throughput_{name}.json"
        if not f.exists():
            continue
        r = json.loads(f.read_text())
        rows.append(f"| {name} | {r['interactions']:,} | {r['users_explained']:,} | {r['scored_pairs']:,} | "
                    f"{r['batched_pairs_per_s'] / 1e6:.1f} M | {r['loop_pairs_per_s'] / 1e6:.2f} M | "
                    f"{r['speedup_vs_loop']:.0f}× | {r['batched_gflops']:.2f} | "
                    f"{r['stacked_matmul_gflops_same_shapes']:.1f} | {r['fraction_of_same_shape_matmul']:.0%} | "
                    f"{r['plain_gemm_gflops_4096']:.1f} | {r['fraction_of_plain_gemm']:.0%} |")
    return "\n".join(rows)


README = Path(__file__).resolve().parents[1] / "README.md"


def write_readme(path: Path = README) -> None:
    text = path.read_text()
    for name, table in (("lambda-table", lambda_table()), ("throughput-table", throughput_table())):
        start, end = f"<!-- {name} -->\n", f"\n<!-- /{name} -->"
        a, b = text.index(start) + len(start), text.index(end)
        text = text[:a] + table + text[b:]
    path.write_text(text)


if __name__ == "__main__":
    import sys

    if "--readme" in sys.argv:
        write_readme()
    else:
        print(lambda_table())
        print()
        print(throughput_table())
