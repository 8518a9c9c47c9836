"""docs/serve.md's table, from benchmarks/results/serve/."""

from benchmarks.common import markdown


def lookup_table(r: dict) -> str:
    """A user lookup's latency and the server's memory on one big run."""
    return markdown(
        "| run | p50 ms | p95 ms (target 200) | server peak MiB (target 500) |",
        [
            f"| {r['users']:,} users, {r['targets']:,} targets, {r['attributions']:,} rows | {r['p50_ms']:.0f} | "
            f"**{r['p95_ms']:.0f}** | **{r['server_peak_rss_mib']:.0f}** |"
        ],
    )
