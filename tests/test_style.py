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
