"""The layer rules of docs/architecture.md, read from the imports of every module in dxplain/."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dxplain"


def imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved), at any depth in the file."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            names.add(prefix)
            names.update(f"{prefix}.{a.name}" for a in node.names)  # `from .. import models` imports a module
    return names


def modules(sub: str = "") -> list[Path]:
    return sorted((PACKAGE / sub).rglob("*.py"))


def offenders(paths, banned) -> dict[str, list[str]]:
    found = {}
    for p in paths:
        bad = sorted(n for n in imports(p) if any(n == b or n.startswith(b + ".") for b in banned))
        if bad:
            found[str(p.relative_to(PACKAGE.parent))] = bad
    return found


def test_the_reader_sees_what_it_checks():
    # A rule checker that finds no imports would pass everything: make sure it resolves both forms.
    names = imports(PACKAGE / "flows" / "common.py")
    assert "dxplain.io.partitions" in names and "prefect" in names and "dxplain.distributed.cluster" in names


def test_kernels_import_no_io_dask_prefect_or_models():
    assert (
        offenders(
            modules("kernels"),
            ["dxplain.io", "dxplain.models", "dxplain.distributed", "dask", "distributed", "prefect"],
        )
        == {}
    )


def test_only_distributed_imports_dask():
    others = [p for p in modules() if "distributed" not in p.relative_to(PACKAGE).parts[:1]]
    assert offenders(others, ["dask", "distributed"]) == {}


def test_nothing_in_the_package_imports_the_top_level_flows():
    assert offenders(modules(), ["flows"]) == {}


def test_io_imports_no_model_classes():
    assert offenders(modules("io"), ["dxplain.models"]) == {}


def test_only_flows_and_the_cli_import_prefect():
    others = [p for p in modules() if p.relative_to(PACKAGE).parts[0] not in ("flows", "cli")]
    assert offenders(others, ["prefect"]) == {}


@pytest.mark.parametrize("path", modules("flows"), ids=lambda p: p.name)
def test_no_flow_branches_on_a_client(path):
    source = path.read_text()
    assert "if client" not in source and "client=None" not in source
