#!/usr/bin/env bash
# Start a Dask scheduler and workers for dxplain on this host.
#   deploy/start-dask-cluster.sh scheduler            # on the scheduler host (port 8786)
#   deploy/start-dask-cluster.sh worker HOST:8786     # on each worker host (or tls://HOST:8786)
# Each worker process runs one task thread with one BLAS thread per core it owns, so processes × BLAS
# threads never exceed the host's cores (DXPLAIN_WORKERS_PER_HOST defaults to the core count;
# DXPLAIN_BLAS_THREADS overrides the share). DXPLAIN_SCHEDULER_PORT moves the scheduler off 8786;
# DXPLAIN_TLS_ARGS (e.g. "--protocol tls --tls-ca-file ca.pem --tls-cert host.pem --tls-key host.key") makes
# every connection TLS. tests/test_s3_cluster.py starts its scheduler and workers with this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export DASK_CONFIG="$here"
cores=$(nproc)
procs=${DXPLAIN_WORKERS_PER_HOST:-$cores}
blas=${DXPLAIN_BLAS_THREADS:-$(( cores / procs > 0 ? cores / procs : 1 ))}
export OMP_NUM_THREADS=$blas OPENBLAS_NUM_THREADS=$blas MKL_NUM_THREADS=$blas NUMBA_NUM_THREADS=$blas
python=${DXPLAIN_PYTHON:-python3}
case "${1:-}" in
  scheduler) exec "$python" -m dask scheduler --port "${DXPLAIN_SCHEDULER_PORT:-8786}" ${DXPLAIN_TLS_ARGS:-} ;;
  worker)    address=${2:?scheduler HOST:PORT}
             case "$address" in *://*) ;; *) address="tcp://$address" ;; esac
             exec "$python" -m dask worker "$address" --nworkers "$procs" --nthreads 1 \
                 --memory-limit "${DXPLAIN_WORKER_MEMORY:-auto}" ${DXPLAIN_TLS_ARGS:-} ;;
  *) echo "usage: $0 scheduler | worker HOST:PORT" >&2; exit 2 ;;
esac
