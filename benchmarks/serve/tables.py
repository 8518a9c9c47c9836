"""docs/serve.md's table, from benchmarks/results/serve/."""

from benchmarks.common import markdown


def lookup_table(records: list[dict]) -> str:
    """A user lookup's latency and the server's memory on big runs, one row each."""
    rows = []
    for r in records:
        data = f"{r['interactions']:,} ratings, " if r.get("interactions") else ""
        rows.append(
            f"| {data}{r['users']:,} users, {r['targets']:,} targets, {r['attributions']:,} rows | "
            f"{r.get('page_cache', 'as found')} | {r['p50_ms']:.0f} | **{r['p95_ms']:.0f}** | "
            f"**{r['server_peak_rss_mib']:.0f}** |"
        )
    return markdown("| run | page cache | p50 ms | p95 ms (target 200) | server peak MiB (target 500) |", rows)
