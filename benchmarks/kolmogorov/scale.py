"""A full Kolmogorov fit on synthetic interactions on a 2-worker LocalCluster, with memory reported.

Generates ``dxplain.datasets.synthetic`` data (Zipf users and items, ratings 1–5), then runs the CLI as
a user would (``dxplain kolmogorov fit --workers 2``, λ and μ given so no validation grid runs) and
records wall time, the BCD objective and the peak resident memory of the flow process and of each
worker (VmHWM, from the mapper).

    python -m benchmarks.kolmogorov.scale --interactions 10000000 --dim 16 --iterations 2
"""

import json
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS, parser
from dxplain.cli import main as cli
from dxplain.datasets.synthetic import generate

OUT = RESULTS / "kolmogorov"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--interactions", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="km-scale-"))
    try:
        t = time.perf_counter()
        summary = generate(work / "data", a.interactions, seed=0)
        generated = time.perf_counter() - t
        out = work / "fit"
        t = time.perf_counter()
        code = cli(
            [
                "kolmogorov",
                "fit",
                "--dataset",
                str(work / "data"),
                "--dim",
                str(a.dim),
                "--iterations",
                str(a.iterations),
                "--lam",
                "1",
                "--mu",
                "0.5",
                "--workers",
                str(a.workers),
                "--out",
                str(out),
                "--max-rules",
                "100000",
            ]
        )
        wall = time.perf_counter() - t
        metrics = json.loads((out / "metrics.json").read_text())
        result = {
            "interactions": a.interactions,
            "users": summary["users"],
            "items": summary["items"],
            "dim": a.dim,
            "iterations": a.iterations,
            "workers": a.workers,
            "exit_code": code,
            "generate_seconds": round(generated, 1),
            "cli_seconds": round(wall, 1),
            "fit_seconds": metrics["fit_seconds"],
            "train_objective": metrics["train_objective"],
            "peak_rss_mib": metrics["peak_rss_mib"],
            "rules_total": metrics["rules_total"],
            "rules_written": metrics["rules"],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"scale_{a.interactions}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
