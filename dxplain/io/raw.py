"""Raw delimited files (GroupLens, RecBole atomic) and downloads: bytes in, tables out."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from ..errors import InputError

log = logging.getLogger(__name__)


def read_delimited(
    path: str | Path,
    names: list[str] | None,
    delimiter: str,
    encoding: str = "utf8",
    column_types: dict | None = None,
    null_values: list[str] | None = None,
) -> pa.Table:
    """Read a delimited text file with pyarrow; ``names=None`` means the first line is the header.

    A two-character delimiter (MovieLens-1M's ``::``) is mapped to a tab first: pyarrow's reader takes one
    character."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    data = path.read_bytes()
    if encoding != "utf8":
        data = data.decode(encoding).encode("utf8")
    if len(delimiter) > 1:
        data, delimiter = data.replace(delimiter.encode(), b"\t"), "\t"
    read = pacsv.ReadOptions(column_names=names, encoding="utf8")
    parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=False)
    convert = pacsv.ConvertOptions(
        column_types=column_types or {}, **({"null_values": null_values} if null_values else {})
    )
    try:
        return pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert)
    except pa.ArrowInvalid as exc:
        raise InputError(f"{path}: not a {delimiter!r}-delimited table ({exc})") from exc


def download(url: str, timeout: float = 20.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - fixed https URLs only
        return resp.read()


def extract_zip_members(blob: bytes, members: dict[str, str], dest: Path) -> None:
    """Write ``members`` (archive name -> file name) of a zip archive into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        for inner, name in members.items():
            (dest / name).write_bytes(zf.read(inner))


def pip_download_wheel(requirement: str) -> bytes:
    """Fetch one wheel from the Python package index with pip (no install, no dependencies)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            tmp,
            requirement,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("*.whl"))
        if res.returncode != 0 or not wheels:
            raise OSError(f"pip download {requirement} failed: {res.stderr.strip()[-500:]}")
        return wheels[0].read_bytes()
