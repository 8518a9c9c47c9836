#!/usr/bin/env bash
# The nightly deployment, end to end on this machine, in one command (deploy/README.md): two nights.
#   deploy/nightly-demo.sh [OUT]        # OUT: where the runs are published (default ./dxplain-demo-out)
# Splits the dataset into a daily export, a folder of Parquet files: day-01 (all but the newest 1% of ratings
# by time) and, after the first night, day-02 (the rest). Starts a Prefect server on a free port with its own
# PREFECT_HOME in a temporary folder (your Prefect profile and database are not touched), creates the
# `dxplain` work pool, deploys `nightly-refresh` from deploy/prefect.yaml (out and dataset set for the demo,
# its 02:00 UTC schedule kept) with a one-off schedule a minute ahead, so that the server's scheduler starts
# the first night as it will every night, starts a worker and waits until that run has published OUT/LATEST.
# Then it appends day-02, runs the deployment again (the second night, warm-started from the first night's
# model) and prints `dxplain diff`: whose recommendations changed, and why. The worker and the server stop
# on exit (also on an error or Ctrl-C).
# Environment: DXPLAIN_DEMO_DATASET (default movielens-100k: found in DXPLAIN_DATA or ../shared/data,
# else downloaded once), DXPLAIN_DEMO_TIMEOUT (seconds a run may take, default 900). Needs the
# virtual environment with dxplain installed first on PATH (`. .venv/bin/activate`).
set -euo pipefail

checkout="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-dxplain-demo-out}" && cd "${1:-dxplain-demo-out}" && pwd)"
dataset="${DXPLAIN_DEMO_DATASET:-movielens-100k}"
timeout="${DXPLAIN_DEMO_TIMEOUT:-900}"
if ! command -v prefect >/dev/null; then
  echo "nightly-demo: no prefect on PATH; run . .venv/bin/activate first" >&2
  exit 2
fi

scratch="$(mktemp -d -t dxplain-nightly-demo.XXXXXX)"
server="" worker=""
stop_group() {  # SIGINT, then SIGKILL after 10 s, to a process group started with setsid below
  [ -n "$1" ] || return 0
  kill -INT -- "-$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL -- "-$1" 2>/dev/null || true
}
cleanup() {
  local status=$?
  # The worker first, while the server still answers it: a worker whose server is gone retries and
  # logs connection tracebacks. Its group holds the flow run and the run's Dask cluster too.
  stop_group "$worker"
  stop_group "$server"
  if [ "$status" -ne 0 ] && [ -f "$scratch/server.log" ]; then
    echo "nightly-demo: failed; the end of the Prefect server's log:" >&2
    tail -n 30 "$scratch/server.log" >&2
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The daily export: day-01 now, day-02 kept aside until the first night has run.
daily="$scratch/daily"
python - "$dataset" "$daily" "$scratch/day-02.parquet" <<'EOF'
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dxplain.datasets import resolve_dataset

d = resolve_dataset(sys.argv[1]).interactions
table = pa.table({"user": d.user_ids.take(pa.array(d.user)), "item": d.item_ids.take(pa.array(d.item)), "rating": d.rating})
order = np.argsort(d.timestamp, kind="stable") if d.timestamp is not None else np.arange(len(d))
late = np.zeros(len(d), bool)
late[order[int(0.99 * len(d)) :]] = True  # the newest 1%: the second day's export
Path(sys.argv[2]).mkdir(parents=True)
pq.write_table(table.filter(pa.array(~late)), Path(sys.argv[2]) / "day-01.parquet")
pq.write_table(table.filter(pa.array(late)), sys.argv[3])
print(f"nightly-demo: {sys.argv[1]} as a daily export: day-01 {int((~late).sum())} ratings, day-02 {int(late.sum())}")
EOF
dataset="$daily"

port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export PREFECT_HOME="$scratch/prefect"
export PREFECT_API_URL="http://127.0.0.1:$port/api"   # a worker refuses to start without it
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
export DASK_LOGGING__DISTRIBUTED=warning               # the cluster's INFO chatter hides the run's progress
export DXPLAIN_CHECKOUT="$checkout"                    # the deployment's pull step: where the flow code is
cd "$checkout"

echo "nightly-demo: Prefect server at $PREFECT_API_URL"
setsid prefect server start --host 127.0.0.1 --port "$port" --no-ui >"$scratch/server.log" 2>&1 &
server=$!
disown  # cleanup stops it; no job notices from bash
python - "$PREFECT_API_URL/health" <<'EOF'
import sys, time, urllib.request
for _ in range(240):  # a loaded 2-core machine may take a minute to start the server
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2).read()
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit("nightly-demo: the Prefect server did not answer within 2 minutes")
EOF

prefect work-pool create dxplain --type process >/dev/null
# The one-off schedule goes in with the deployment (`--rrule` adds it to prefect.yaml's): the scheduler
# plans a deployment's runs when it is created or updated, and a schedule added afterwards got no run
# for minutes (seen here). 60 s ahead leaves time for the deploy on a busy machine: an occurrence already
# past when the scheduler plans is skipped.
at="$(python -c 'import datetime as dt
print((dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)).strftime("%Y%m%dT%H%M%SZ"))')"
prefect --no-prompt deploy --prefect-file deploy/prefect.yaml --name nightly-refresh \
  --param "dataset=$dataset" --param "out=$out" --rrule "DTSTART:$at
RRULE:FREQ=MINUTELY;COUNT=1" >/dev/null
prefect deployment schedule ls dxplain-refresh/nightly-refresh

setsid prefect worker start --pool dxplain --limit 1 &
worker=$!
disown

echo "nightly-demo: waiting for the scheduled run (dataset $dataset, out $out)"
python - "$PREFECT_API_URL" "$timeout" "$at" <<'EOF'
import datetime as dt
import json, signal, sys, time, urllib.request

api, timeout = sys.argv[1], float(sys.argv[2])
at = dt.datetime.strptime(sys.argv[3], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)


def flow_runs() -> list[dict]:
    request = urllib.request.Request(f"{api}/flow_runs/filter", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=10))


start = time.monotonic()
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))  # Ctrl-C: the script's cleanup, no traceback
while time.monotonic() - start < timeout:
    # the one-off schedule's run, created by the server's scheduler
    runs = [r for r in flow_runs()
            if r["auto_scheduled"] and dt.datetime.fromisoformat(r["expected_start_time"]) == at]
    if not runs and time.monotonic() - start > 120:
        sys.exit(f"nightly-demo: the server's scheduler created no run for {at} in 2 minutes (log below)")
    done = [r for r in runs if r["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")]
    if done:
        run = done[0]
        print(f"nightly-demo: scheduled run {run['name']} ({run['expected_start_time']}): {run['state_name']}")
        sys.exit(0 if run["state_type"] == "COMPLETED" else 1)
    time.sleep(5)
sys.exit(f"nightly-demo: no scheduled run finished within {timeout:.0f} s")
EOF
python - "$out" <<'EOF'
import sys

from dxplain.io.runs import open_run, resolve_run

try:
    run = resolve_run(sys.argv[1])
except Exception as exc:  # noqa: BLE001 - what is missing, in one line
    sys.exit(f"nightly-demo: nothing was published: {exc}")
first = open_run(run).head(1).to_pylist()[0]
print(f"nightly-demo: published {run} ({sys.argv[1]}/LATEST names it); one of its explanations:")
print(f"  dxplain explain --run {sys.argv[1]} --user {first['user']} --item {first['item']}")
EOF

echo "nightly-demo: the second night: day-02 appended to $daily; the deployment runs again"
mv "$scratch/day-02.parquet" "$daily/day-02.parquet"
if ! prefect deployment run dxplain-refresh/nightly-refresh --watch --watch-interval 5 \
  --watch-timeout "$timeout" >"$scratch/second-night.log" 2>&1 || ! grep -q "Completed" "$scratch/second-night.log"; then
  echo "nightly-demo: the second night did not complete:" >&2
  tail -n 20 "$scratch/second-night.log" >&2
  exit 1
fi
echo "nightly-demo: the second night completed; what changed since the first (dxplain diff --out $out):"
dxplain diff --out "$out" --users 3 --reasons 2
