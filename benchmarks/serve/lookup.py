"""``dxplain serve``'s user lookup against a big run: latency percentiles and the server's memory.

    python -m benchmarks.serve.lookup --out OUT [--cold]   # OUT: the --out folder of a refresh (its LATEST run)

Starts ``dxplain serve OUT`` as a subprocess (as a user would), then asks ``GET /api/runs/latest/users/{user}`` for
``--lookups`` users drawn at random (seeded) from the run's user index, one after another over one HTTP
connection. The first request also reads the run's index and the dataset's catalogue (reported apart); the
percentiles are over the rest. ``--cold`` drops the page cache first (root), so every row group comes from disk.
The server's peak RSS (VmHWM) is read from /proc after the last request. Each run's record replaces the earlier
one of the same dataset in ``benchmarks/results/serve/lookup.json``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from benchmarks.common import RESULTS, ROOT, parser
from dxplain.io import run_lookup, runs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main():
    import httpx

    ap = parser(__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lookups", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cold", action="store_true", help="drop the page cache first (needs root)")
    a = ap.parse_args()
    if a.cold and os.geteuid() != 0:
        ap.error("--cold drops the page cache: run as root, or leave it out")
    run = runs.resolve_run(a.out)
    summary = runs.read_manifest(run)["summary"]
    users = run_lookup.UserIndex(run).table.column("user").unique().to_pylist()
    picks = np.random.default_rng(a.seed).choice(len(users), a.lookups + 1, replace=False)
    if a.cold:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "dxplain.cli", "serve", a.out, "--port", str(port)], cwd=ROOT, stderr=subprocess.PIPE
    )
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=120) as client:
            deadline = time.time() + 60
            while True:
                try:
                    client.get(f"{base}/api/runs")
                    break
                except httpx.TransportError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.2)
            seconds, rows = [], []
            for n, i in enumerate(picks):
                t0 = time.perf_counter()
                r = client.get(f"{base}/api/runs/latest/users/{users[i]}")
                seconds.append(time.perf_counter() - t0)
                r.raise_for_status()
                rows.append(sum(len(t["reasons"]) for t in r.json()["targets"]))
        peak = vm_hwm_mib(server.pid)
    finally:
        server.terminate()
        server.wait(30)
    ms = np.array(seconds[1:]) * 1e3
    data = Path(str(summary.get("dataset"))) / "interactions.parquet"
    out = {
        "run": run.name if hasattr(run, "name") else str(run),
        "dataset": summary.get("dataset"),
        "interactions": pq.read_metadata(data).num_rows if data.exists() else None,
        "page_cache": "dropped" if a.cold else "as found",
        "users": len(users),
        "targets": summary.get("targets"),
        "attributions": summary.get("attributions"),
        "lookups": a.lookups,
        "first_lookup_ms": round(seconds[0] * 1e3, 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p95_ms": round(float(np.percentile(ms, 95)), 1),
        "max_ms": round(float(ms.max()), 1),
        "rows_per_lookup_median": float(np.median(rows)),
        "server_peak_rss_mib": round(peak, 1),
        "targets_p95_ms": 200,
        "targets_rss_mib": 500,
    }
    print(json.dumps(out))
    store = RESULTS / "serve" / "lookup.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    kept = json.loads(store.read_text()) if store.exists() else []
    kept = [r for r in (kept if isinstance(kept, list) else [kept]) if r.get("dataset") != out["dataset"]]
    kept = sorted([*kept, out], key=lambda r: r["attributions"])
    store.write_text(json.dumps(kept, indent=2) + "\n")


if __name__ == "__main__":
    main()
