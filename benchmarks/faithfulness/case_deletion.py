"""Case-deletion evaluation (issue 4): run the evaluate flow per dataset, then collect its outputs.

    python -m benchmarks.faithfulness.case_deletion
        # breast-cancer and digits-4v9 at 40×40, synthetic-sparse at 3×8, movielens-100k SGD-MF at 2×5,
        # ALS-MF, SoftImpute and two-tower at 2×8; ~4 h on 2 cores
    python -m benchmarks.faithfulness.case_deletion --only movielens-100k --trials 5 --targets 10
    python -m benchmarks.faithfulness.case_deletion --only movielens-100k --model two-tower    # 2×8, ~40 min on 2 cores

Copies each run's deletions.csv, auc_del.md and deletion_curves.png to benchmarks/results/faithfulness/<dataset>.*
and adds to the Markdown a comparison on common targets: influence functions have no samples of one
sign for some targets (the λ·sign(θ) term shifts every sample's score), so each method's AUC is also
reported over only the (trial, target, side) curves that every method has.
"""

from __future__ import annotations

import csv
import shutil
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.common import RESULTS, parser
from dxplain.evaluation.deletion import summarise
from dxplain.evaluation.report import curve_aucs

FAITHFULNESS = RESULTS / "faithfulness"
# (dataset, model): (trials, targets) — the sizes in docs/faithfulness.md; CF retraining is the costly part.
PLAN = {
    ("breast-cancer", None): (40, 40),
    ("digits-4v9", None): (40, 40),
    ("synthetic-sparse", None): (3, 8),
    ("movielens-100k", "sgd"): (2, 5),
    ("movielens-100k", "als"): (2, 8),
    ("movielens-100k", "softimpute"): (2, 8),
    ("movielens-100k", "two-tower"): (2, 8),
}


def common_targets(csv_path: Path) -> str:
    aucs = curve_aucs(list(csv.DictReader(open(csv_path))))
    methods = sorted({m for m, *_ in aucs})
    lines = [
        "",
        "AUC-DEL over the curves every method has (same trials, targets and side):",
        "",
        "| method | AUC-DEL₊ (↓) | AUC-DEL₋ (↑) | curves |",
        "|---|---|---|---|",
    ]
    cells = defaultdict(dict)
    for side in ("DEL+", "DEL-"):
        keys = set.intersection(*[{(t, g) for (mm, s, t, g) in aucs if mm == m and s == side} for m in methods])
        for m in methods:
            s = summarise([aucs[(m, side, *k)] for k in keys])
            cells[m][side] = (f"{s.mean:+.4f} ± {s.half_width:.4f}", s.count)
    for m in methods:
        lines.append(
            f"| {m} | {cells[m]['DEL+'][0]} | {cells[m]['DEL-'][0]} | {cells[m]['DEL+'][1]} + {cells[m]['DEL-'][1]} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    from dxplain.flows.evaluate import evaluate

    ap = parser(__doc__)
    ap.add_argument("--only", help="one dataset")
    ap.add_argument("--model", help="one CF model (als, softimpute, sgd, two-tower)")
    ap.add_argument("--trials", type=int)
    ap.add_argument("--targets", type=int)
    ap.add_argument("--out", default="dxplain-out")
    args = ap.parse_args()
    FAITHFULNESS.mkdir(parents=True, exist_ok=True)
    for (name, model), (trials, targets) in PLAN.items():
        if (args.only and name != args.only) or (args.model and model != args.model):
            continue
        s = evaluate(
            dataset=name,
            model=model or "als",
            trials=args.trials or trials,
            targets=args.targets or targets,
            out=args.out,
        )
        collect(f"{name}-{model}" if model else name, Path(s["folder"]))


def collect(name: str, folder: Path) -> None:
    FAITHFULNESS.mkdir(parents=True, exist_ok=True)
    from dxplain.evaluation.report import deletion_plot_png

    shutil.copy(folder / "deletions.csv", FAITHFULNESS / f"{name}.csv")
    md = (folder / "auc_del.md").read_text()
    rows = [
        {**r, "fraction": float(r["fraction"]), "delta": float(r["delta"])}
        for r in csv.DictReader(open(folder / "deletions.csv"))
    ]
    png = deletion_plot_png(rows, md.splitlines()[0].lstrip("# "))  # redrawn with this version's labels
    if png:
        (FAITHFULNESS / f"{name}.png").write_bytes(png)
    md += common_targets(folder / "deletions.csv")
    (FAITHFULNESS / f"{name}.md").write_text(md)
    (FAITHFULNESS / f"{name}.summary.json").write_text((folder / "summary.json").read_text())
    print(md)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--collect":  # collect an existing run folder: --collect DIR
        folder = Path(sys.argv[2])
        import json

        summary = json.loads((folder / "summary.json").read_text())
        cf = summary.get("model") in ("als", "sgd", "softimpute")
        collect(f"{summary['dataset']}-{summary['model']}" if cf else summary["dataset"], folder)
    else:
        main()
