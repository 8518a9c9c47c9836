"""Where the flow's memory goes while the negatives run loads an Amazon-like set: VmHWM and VmRSS of this
process after each step of the load (reading the catalogue, the scan, parting P, sampling N, parting
D), the peak reset between steps (``/proc/self/clear_refs``), so each line's HWM is that step's own.

    python -m benchmarks.scaling.flow_memory --size 50m

The steps are the ones ``flows.common.load_training`` and ``partition`` run, on the 2-worker
LocalCluster, into a scratch folder that is removed at the end. Linux only (``/proc``). The output is
printed; docs/scaling.md quotes it.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from benchmarks.common import parser
from benchmarks.scaling.common import AMAZON_SIZES, amazon_dataset


def memory(label: str, t0: float) -> None:
    with open("/proc/self/status") as fh:
        got = {line.split(":")[0]: int(line.split()[1]) // 1024 for line in fh if line.startswith(("VmHWM", "VmRSS"))}
    print(
        f"{label:18s} peak {got['VmHWM']:6,d} MiB  resident {got['VmRSS']:6,d} MiB  {time.perf_counter() - t0:6.1f} s",
        flush=True,
    )
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak starts again from what is resident: the next line is the next step's own


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--size", default="50m", choices=sorted(AMAZON_SIZES))
    ap.add_argument("--per-positive", type=int, default=4)
    a = ap.parse_args()
    folder = amazon_dataset(AMAZON_SIZES[a.size])
    t0 = time.perf_counter()
    from dxplain import ingest
    from dxplain.config import Settings
    from dxplain.distributed.cluster import connect
    from dxplain.distributed.mapper import DaskMapper
    from dxplain.io.atomic import join
    from dxplain.io.dataset_folders import read_catalogue_ids
    from dxplain.models.implicit_mf import sample_in_parts

    out = tempfile.mkdtemp(prefix="dxplain-flow-memory-")
    try:
        memory("imports", t0)
        with connect(Settings(workers=2, blas_threads=1)) as client:
            mapper = DaskMapper(client)
            memory("cluster", t0)
            user_ids, item_ids = read_catalogue_ids(str(folder))
            memory("catalogue", t0)
            P = ingest.scan_source(mapper, str(folder / "interactions.parquet"), user_ids, item_ids)
            memory("scan", t0)
            P_parts = ingest.stream_partitions(mapper, str(folder / "interactions.parquet"), P, join(out, "P"))
            memory("partition P", t0)
            source = join(out, "sampled", "interactions.parquet")
            D = sample_in_parts(mapper, P_parts, a.per_positive, 0, source)
            memory("sample negatives", t0)
            del P  # as in the flow: P's summary goes once D's is made (``flows.common.sampled_training``)
            ingest.stream_partitions(mapper, source, D, join(out, "D"))
            memory("partition D", t0)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
