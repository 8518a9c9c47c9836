"""What ``dxplain report`` reads and writes: a run's rows, a result folder's files, and the page.

A page is one HTML file written atomically; an existing file is refused unless ``force``. It never goes
into a run folder (which stays a clean Parquet dataset) nor into a result folder (written whole by its flow).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import InputError
from . import runs
from .atomic import Location, exists, filesystem, join, write_text_atomic

# A result folder's summary: summary.json (io.results) or, for the GAMMLI fit, metrics.json.
SUMMARIES = ("summary.json", "metrics.json")
TEXT_SUFFIXES = (".md", ".txt", ".json")
TEXT_LIMIT = 100_000  # characters of a text file shown; a longer one is cut, and the page says so


def run_batches(run: Location, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """A run's rows, ``columns`` only, batch by batch (bounded memory on any run size)."""
    yield from runs.open_run(run).to_batches(columns=columns)


def run_rows_of_users(run: Location, users: list) -> pa.Table:
    """Every row of a run whose target user is one of ``users``."""
    if not users:
        return runs.open_run(run).schema.empty_table()
    return runs.open_run(run).to_table(filter=pads.field("user").isin(pa.array(users)))


def summary_file(path: Location) -> str | None:
    """The name of a result folder's summary (``SUMMARIES``), or None: then it is not a result folder."""
    return next((name for name in SUMMARIES if exists(join(path, name))), None)


@dataclass
class ResultFolder:
    """A result folder's contents as the page shows them (relative file name → content)."""

    summary: dict
    images: dict[str, bytes] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    tables: dict[str, tuple[pa.Table, int]] = field(default_factory=dict)  # first rows, and the row count


def read_result_folder(path: Location, head_rows: int = 20) -> ResultFolder:
    """The summary, every PNG, Markdown, text and other JSON file, and the first ``head_rows`` of every
    Parquet table."""
    fs, root = filesystem(path)
    summary_name = summary_file(path)
    summary = json.loads(fs.cat_file(f"{root}/{summary_name}").decode())
    folder = ResultFolder(summary)
    for file in sorted(fs.find(root)):
        name = str(PurePosixPath(file).relative_to(root))
        if name.startswith(".") or name == summary_name:
            continue
        if name.endswith(".png"):
            folder.images[name] = fs.cat_file(file)
        elif name.endswith(TEXT_SUFFIXES):
            text = fs.cat_file(file).decode(errors="replace")
            folder.texts[name] = text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "\n… (cut)"
        elif name.endswith(".parquet"):
            with fs.open(file, "rb") as fh:
                pf = pq.ParquetFile(fh)
                head = next(pf.iter_batches(batch_size=head_rows), None)
                folder.tables[name] = (
                    pa.Table.from_batches([head]) if head is not None else pf.schema_arrow.empty_table(),
                    pf.metadata.num_rows,
                )
    return folder


def check_page_out(path: Location, force: bool) -> None:
    """Refuse an ``--out`` that is a folder, or an existing file without ``force`` (before any work)."""
    fs, p = filesystem(path)
    if fs.isdir(p):
        raise InputError(f"--out {path}: is a folder; give a file name ending in .html")
    if fs.exists(p) and not force:
        raise InputError(f"--out {path}: the file exists; give another name, or --force to replace it")


def write_page(path: Location, text: str, force: bool = False) -> Location:
    """Write the page at ``path`` atomically (a reader never sees half of it); return ``path``."""
    check_page_out(path, force)
    write_text_atomic(path, text)
    return path
