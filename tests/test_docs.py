"""The README stays short, every relative link resolves inside the repository, and the docs' result
tables are exactly what ``python -m benchmarks.render --docs`` renders from ``benchmarks/results/``."""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def load_render():
    """``benchmarks.render``, importable from the repository root (``python -m pytest`` runs there)."""
    return importlib.import_module("benchmarks.render")


def test_readme_is_at_most_12_kb():
    assert (ROOT / "README.md").stat().st_size <= 12 * 1024


def test_docs_stay_within_their_budget():
    # issue 52: docs/ at most 150 KB in all and no page over 400 lines (what holds now, not a diary)
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert sum(p.stat().st_size for p in pages) <= 150_000
    assert not [p.name for p in pages if len(p.read_text().splitlines()) > 400]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_to_files_in_the_repository(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists() or ROOT not in path.parents:
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files or outside the repository: {broken}"


def test_result_tables_equal_the_rendering_of_benchmarks_results():
    render = load_render()
    stale = [p.name for p, text in render.render_docs(ROOT / "docs").items() if p.read_text() != text]
    assert not stale, f"{stale}: tables differ from benchmarks/results; run python -m benchmarks.render --docs"


def test_every_table_lives_in_exactly_one_page():
    render = load_render()
    names = [name for tables in render.TABLES.values() for name in tables]
    assert len(names) == len(set(names))
    for page in PAGES:
        text = page.read_text()
        for name in names:
            owner = page.parent.name == "docs" and name in render.TABLES.get(page.name, {})
            assert (f"<!-- {name} -->" in text) == owner, f"{page.name}: {name}"
    assert not render.unplaced(ROOT / "docs")
