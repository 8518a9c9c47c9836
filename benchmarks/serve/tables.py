"""docs/serve.md's table, from benchmarks/results/serve/."""

from benchmarks.common import markdown


def short(n: float) -> str:
    """A count as 50M or 500k (a table row names a run's size, not its exact counts)."""
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k"


def lookup_table(records: list[dict]) -> str:
    """A user lookup's latency and the server's memory on big runs, one row each."""
    rows = []
    for r in records:
        data = f"{short(r['interactions'])} ratings, " if r.get("interactions") else ""
        rows.append(
            f"| {data}{short(r['users'])} users, {short(r['targets'])} targets, {short(r['attributions'])} rows | "
            f"{r.get('page_cache', 'as found')} | {r['p50_ms']:.0f} | **{r['p95_ms']:.0f}** | "
            f"**{r['server_peak_rss_mib']:.0f}** |"
        )
    return markdown("| run | page cache | p50 ms | p95 ms (target 200) | server peak MiB (target 500) |", rows)
