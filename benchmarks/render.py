"""Render the docs' result tables from benchmarks/results/ (no figure is typed by hand).

    python -m benchmarks.render          # print every table
    python -m benchmarks.render --docs   # rewrite them between the markers of the docs/ pages
    python -m benchmarks.render --check  # exit 1 if a page differs from what --docs would write or lacks a marker

Each area renders its own tables (``benchmarks/<area>/tables.py``); ``TABLES`` says which page and marker
each one fills. A table lives between ``<!-- name -->`` and ``<!-- /name -->`` in exactly one page. Tables
come from the JSON results, or, where a benchmark writes its own Markdown (scaling, negatives App. C, SBQ
applications, case deletion), that Markdown is included as it is (case deletion drops a table that repeats
the one above it). ``--check`` also fails on a table whose
marker is not in its page. ``tests/test_docs.py`` checks that the committed pages equal this rendering and
hold every table.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.als import tables as als
from benchmarks.common import ROOT, load_result
from benchmarks.faithfulness import tables as faithfulness
from benchmarks.gammli import tables as gammli
from benchmarks.kolmogorov import tables as kolmogorov
from benchmarks.negatives import tables as negatives
from benchmarks.nightly import tables as nightly
from benchmarks.pairwise import tables as pairwise
from benchmarks.prototypes import tables as prototypes
from benchmarks.scaling import tables as scaling
from benchmarks.serve import tables as serve

DOCS = ROOT / "docs"


def table(render: Callable[[dict], str], path: str) -> Callable[[], str]:
    """``render`` of ``benchmarks/results/<path>``, read when the table is drawn."""
    return lambda: render(load_result(path))


# page → marker → renderer (and the results file it draws): each table lives in exactly one page.
TABLES: dict[str, dict[str, Callable[[], str]]] = {
    "model.md": {
        "lambda-table": table(als.lambda_table, "als/select_lambda.json"),
        "biased-table": table(als.biased_table, "als/biased_vs_peers.json"),
        "biased-parts-table": table(als.biased_parts_table, "als/biased_parts.json"),
        "ials-vs-implicit-table": table(als.ials_vs_implicit_table, "als/ials_vs_implicit.json"),
        "ials-seeds-table": table(als.ials_seeds_table, "als/ials_seeds.json"),
        "import-refresh-table": table(als.import_refresh_table, "als/import_refresh.json"),
    },
    "serve.md": {"serve-lookup-table": table(serve.lookup_table, "serve/lookup.json")},
    "operations.md": {"nightly-warm-table": nightly.warm_table},
    "scaling.md": {
        "throughput-table": scaling.throughput_table,
        "als-vs-implicit-table": table(als.vs_implicit_table, "als/vs_implicit.json"),
        "converged-fit-table": table(als.converged_fit_table, "als/converged_fit.json"),
        "converged-ratings-table": table(als.converged_ratings_table, "als/converged_ratings.json"),
        "blas-threads-table": table(als.blas_threads_table, "als/blas_threads.json"),
        "newton-passes-table": table(als.newton_passes_table, "als/newton_passes.json"),
        "heavy-items-table": table(scaling.heavy_items_table, "scaling/heavy_items_synthetic-5m.json"),
        "own-topn-table": scaling.own_topn_table,
        "scaling-table": scaling.scaling_table,
        "implicit-default-table": table(scaling.implicit_default_table, "scaling/implicit_default.json"),
    },
    "negatives.md": {
        "negatives-appc-table": negatives.appc_table,
        "negatives-appc-sampled4-table": negatives.appc_sampled4_table,
        "negatives-scan-table": table(negatives.scan_table, "negatives/scan.json"),
        "amazon-negatives-table": table(scaling.amazon_negatives_table, "scaling/amazon/negatives.json"),
    },
    "prototypes.md": {
        "sbq-scale-table": table(prototypes.scale_table, "prototypes/scale.json"),
        "amazon-sbq-table": table(scaling.amazon_sbq_table, "scaling/amazon/sbq.json"),
        "amazon-sbq-implicit-table": table(scaling.amazon_sbq_table, "scaling/amazon/sbq_implicit.json"),
        "sbq-applications": prototypes.applications_table,
    },
    "faithfulness.md": {
        "case-deletion-sparse": faithfulness.case_deletion("breast-cancer", "digits-4v9", "synthetic-sparse"),
        "case-deletion-cf": faithfulness.case_deletion(
            "movielens-100k-sgd", "movielens-100k-als", "movielens-100k-softimpute", "movielens-100k-two-tower"
        ),
    },
    "gammli.md": {
        "gammli-ml100k-table": table(gammli.ml100k_table, "gammli/ml100k.json"),
        "gammli-ml100k-splits-table": table(gammli.ml100k_splits_table, "gammli/ml100k_splits.json"),
        "gammli-sim-table": table(gammli.sim_tables, "gammli/sim.json"),
        "gammli-scale-table": table(gammli.scale_table, "gammli/scale.json"),
    },
    "kolmogorov.md": {
        "kolmogorov-fw-steps": table(kolmogorov.fw_steps, "kolmogorov/fw_steps.json"),
        "kolmogorov-table3": table(kolmogorov.table3, "kolmogorov/table3.json"),
        "kolmogorov-table4": table(kolmogorov.table4, "kolmogorov/table4.json"),
        "kolmogorov-rules": table(kolmogorov.rules, "kolmogorov/table4.json"),
        "kolmogorov-psi-throughput": table(kolmogorov.psi_throughput, "kolmogorov/psi_throughput_100000.json"),
        "kolmogorov-scale": lambda: kolmogorov.scale(
            load_result("kolmogorov/scale_10000000.json"), load_result("kolmogorov/scale_1000000.json")
        ),
    },
    "pairwise.md": {
        "pairwise-speed": table(pairwise.speed_table, "pairwise/speed.json"),
        "pairwise-masking": table(pairwise.masking_table, "pairwise/masking.json"),
        "pairwise-rai-vs-asi": table(pairwise.rai_vs_asi_table, "pairwise/rai_vs_asi.json"),
        "pairwise-cluster": table(pairwise.cluster_table, "pairwise/cluster.json"),
        "pairwise-digits": table(pairwise.digits_table, "pairwise/digits.json"),
        "pairwise-quality": table(pairwise.quality_table, "pairwise/quality.json"),
        "pairwise-reference": table(pairwise.reference_table, "pairwise/reference.json"),
    },
}


def fill(text: str, tables: dict[str, Callable[[], str]]) -> str:
    """``text`` with each marker pair's content replaced by its rendered table; markers it lacks are skipped."""
    for name, render in tables.items():
        start = f"<!-- {name} -->\n"
        if start not in text:
            continue
        a = text.index(start) + len(start)
        b = text.index(f"<!-- /{name} -->", a)
        text = text[:a] + render() + "\n" + text[b:]
    return text


def render_docs(docs: Path = DOCS) -> dict[Path, str]:
    """Every page that holds tables, as ``--docs`` would write it."""
    return {docs / page: fill((docs / page).read_text(), tables) for page, tables in TABLES.items()}


def unplaced(docs: Path = DOCS) -> list[str]:
    """The tables whose marker is not in their page yet."""
    return [
        f"{page}: {name}"
        for page, tables in TABLES.items()
        for name in tables
        if f"<!-- {name} -->\n" not in (docs / page).read_text()
    ]


def write_docs(docs: Path = DOCS) -> None:
    for path, text in render_docs(docs).items():
        if path.read_text() != text:
            path.write_text(text)


if __name__ == "__main__":
    if "--docs" in sys.argv:
        write_docs()
    elif "--check" in sys.argv:
        stale = [str(p) for p, text in render_docs().items() if p.read_text() != text]
        print(
            "\n".join(
                f"{p}: tables differ from benchmarks/results (run python -m benchmarks.render --docs)" for p in stale
            )
        )
        missing = unplaced()
        print("\n".join(f"not placed: {m} (add its markers to the page)" for m in missing), file=sys.stderr)
        sys.exit(1 if stale or missing else 0)
    else:
        for page, tables in TABLES.items():
            for name, render in tables.items():
                print(f"<!-- {page}: {name} -->\n{render()}", end="\n\n")
