"""The style is mechanical: ``ruff check`` and ``ruff format --check`` (settings in pyproject.toml) pass."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> list[str]:
    found = Path(sys.executable).with_name("ruff")
    if found.exists():
        return [str(found)]
    if shutil.which("ruff"):
        return ["ruff"]
    pytest.fail("ruff is not installed: pip install -e '.[test]' brings it")


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(args):
    done = subprocess.run([*ruff(), *args, "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_parallel_kernel_uses_fastmath():
    """numba compiled ``parallel=True, fastmath=True`` kernels differently fresh and from its cache
    (``ridge_cg_rows_fused``: a refresh's factors 4e-12 apart, so a cluster run's parts differed in bytes from an
    in-process run's whenever one process compiled afresh): parallel kernels keep IEEE order."""
    import ast

    offenders = []
    for path in (ROOT / "dxplain").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    keys = {k.arg: k.value for k in getattr(d, "keywords", [])}
                    on = [
                        n for n in ("parallel", "fastmath") if isinstance(keys.get(n), ast.Constant) and keys[n].value
                    ]
                    if len(on) == 2:
                        offenders.append(f"{path}:{node.name}")
    assert not offenders, offenders
