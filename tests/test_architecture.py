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


# --- factor rows are asked nothing, and only io/ opens files -----------------------------------------------

FACTOR_ROWS = PACKAGE / "models" / "factor_rows.py"  # the module that defines the factor-rows protocol


def trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text()) for p in modules()}


def factor_rows_classes(parsed: dict[Path, ast.Module]) -> set[str]:
    """``FactorRows`` and every class in dxplain/ that derives from it, directly or through another."""
    bases = {
        node.name: {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
        for tree in parsed.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    found, grown = {"FactorRows"}, True
    while grown:
        more = {name for name, of in bases.items() if of & found} - found
        found, grown = found | more, bool(more)
    return found


def isinstance_checks(tree: ast.Module, classes: set[str]) -> list[int]:
    """Lines of ``isinstance(x, C)`` (C alone, dotted, or in a tuple) with C one of ``classes``."""

    def names(node) -> set[str]:
        if isinstance(node, ast.Tuple):
            return set().union(*(names(e) for e in node.elts))
        return {node.id} if isinstance(node, ast.Name) else {getattr(node, "attr", "")}

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and names(node.args[1]) & classes
    ]


def open_calls(tree: ast.Module) -> list[int]:
    """Lines calling the builtin ``open(…)`` (not ``x.open``, not ``zarr.open_group``)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"
    ]


def test_the_checkers_see_what_they_check():
    # Each rule must be able to fail: the classes are found, and so are the calls they look for.
    classes = factor_rows_classes(trees())
    assert {"FactorRows", "ArrayRows", "Blocks"} <= classes
    sample = ast.parse("isinstance(F, np.ndarray)\nisinstance(F, Blocks)\nisinstance(F, (int, blocks.Blocks))\n")
    assert isinstance_checks(sample, classes) == [2, 3]
    assert isinstance_checks(ast.parse((FACTOR_ROWS).read_text()), {"ndarray"})  # factor_rows() asks here
    assert open_calls(ast.parse("open(p)\nfs.open(p)\nwith open(p, 'wb') as fh: pass\n")) == [1, 3]
    assert open_calls(ast.parse((PACKAGE / "io" / "spill.py").read_text()))


def test_no_module_asks_which_factor_rows_it_holds():
    """Factor rows in memory or in row-block files are one protocol (``models.factor_rows``): no module but
    the one that defines it checks ``isinstance`` against a class implementing it."""
    parsed = trees()
    classes = factor_rows_classes(parsed)
    found = {
        str(p.relative_to(PACKAGE.parent)): lines
        for p, tree in parsed.items()
        if p != FACTOR_ROWS and (lines := isinstance_checks(tree, classes))
    }
    assert found == {}


def test_only_io_opens_files():
    found = {
        str(p.relative_to(PACKAGE.parent)): lines
        for p, tree in trees().items()
        if p.relative_to(PACKAGE).parts[0] != "io" and (lines := open_calls(tree))
    }
    assert found == {}
