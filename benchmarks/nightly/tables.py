"""The docs' table of the nightly area, from ``benchmarks/results/nightly/``."""

from __future__ import annotations

import json

from benchmarks.common import RESULTS, markdown


def trained(night: dict) -> str:
    """A night's sweeps, and its Newton steps when it took any (results before they were kept: sweeps alone)."""
    sweeps, newton = night["training_start"].get("sweeps"), night.get("newton_steps")
    return f"{sweeps} + {newton}" if newton else f"{sweeps}"


def warm_table() -> str:
    """docs/operations.md: night 2 warm against cold, per data set benchmarked."""
    rows = []
    for f in sorted((RESULTS / "nightly").glob("warm_*.json")):
        r = json.loads(f.read_text())
        w, c = r["night2_warm"], r["night2_cold"]
        s = w["training_start"]
        ok = " · ".join("yes" if x["fidelity_ok"] else "no" for x in (w, c))
        rows.append(
            f"| {r['data']} | {r['rows_day2']:,} ({s['users_new']} · {s['items_new']}) | {w['wall_s']:.0f} s, "
            f"{trained(w)} | {c['wall_s']:.0f} s, {trained(c)} | "
            f"**{r['warm_over_cold_wall']:.2f}** | {r['top10_same_share']:.1%} | {ok} |"
        )
    return markdown(
        "| data | day 2 rows (new users · items) | warm: wall, sweeps (+ Newton) | cold | warm / cold | same top-10 | "
        "tol met |",
        rows,
    )
