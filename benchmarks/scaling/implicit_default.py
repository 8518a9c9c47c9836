"""``dxplain refresh`` with its defaults on Amazon-shaped implicit feedback, as a new user would run it.

    python -m benchmarks.scaling.implicit_default                    # 300k interactions (an Amazon category's size)
    python -m benchmarks.scaling.implicit_default --sizes 300k,1m

The set is ``dxplain datasets synth --kind amazon --implicit`` (every interaction a 1; docs/scaling.md,
"Amazon-like data"), cached in ``~/.cache/dxplain/bench/amazon-implicit-N``. The refresh runs as a subprocess with
nothing but ``--dataset`` and ``--out`` (a LocalCluster of 2 workers, Prefect's ephemeral mode): the data is detected
as implicit feedback and the default implicit model (iALS) is trained over the parts to the identity bound the
default ``--tol`` asks for, then every user's top-10 explained. Recorded per size: wall seconds, stage seconds, the
model's kind and sweeps, the fidelity and the peak memory of the flow's process and the workers
(``benchmarks/results/scaling/implicit_default.json``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from benchmarks.common import CACHE, ROOT, cli_command, parser
from benchmarks.scaling.common import SCALING
from dxplain.datasets.synthetic import generate
from dxplain.io.model_store import model_attrs

SIZES = {"300k": 300_000, "1m": 1_000_000}


def dataset(n: int):
    folder = CACHE / f"amazon-implicit-{n}"
    if not (folder / "interactions.parquet").exists():
        generate(folder, n, kind="amazon", implicit=True, seed=0)
    return folder


def main():
    ap = parser(__doc__)
    ap.add_argument("--sizes", default="300k")
    ap.add_argument("--out", default="/tmp/dxplain-implicit-default")
    a = ap.parse_args()
    rows = []
    for size in a.sizes.split(","):
        folder, out = dataset(SIZES[size]), f"{a.out}-{size}"
        shutil.rmtree(out, ignore_errors=True)  # a cold run: no stored model or parts to reuse
        t0 = time.perf_counter()
        p = subprocess.run(cli_command("refresh", folder, out), capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"refresh failed on {folder}:\n{p.stderr[-3000:]}")
        s = json.loads(p.stdout[: p.stdout.index("\n}") + 2])
        info = model_attrs(s["model"]).get("info", {})
        info = json.loads(info) if isinstance(info, str) else info
        rows.append(
            {
                "size": size,
                "interactions": SIZES[size],
                "sweeps": info.get("sweeps"),
                "users": s["users"],
                "targets": s["targets"],
                "wall_s": round(wall, 1),
                "stage_seconds": s["stage_seconds"],
                "model_kind": s["model_kind"],
                "model_settings": s["model_settings"],
                "grad_norm": s["grad_norm"],
                "fidelity_tol": s["fidelity_tol"],
                "fidelity_max_rel_error": s["fidelity_max_rel_error"],
                "peak_rss_mib": s["peak_rss_mib"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    SCALING.mkdir(parents=True, exist_ok=True)
    (SCALING / "implicit_default.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
