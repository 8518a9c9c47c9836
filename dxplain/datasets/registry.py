"""Resolve ``--dataset NAME|PATH`` to a prepared dataset, preparing or fetching it on first use."""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import Settings
from ..errors import InputError
from ..io.atomic import Location, filesystem, is_local
from ..io.dataset_folders import PREPARED_FILES, Dataset, read_catalogue, read_dataset
from . import movielens

log = logging.getLogger(__name__)
ALIASES = {"movielens-100k": movielens.NAME, "ml-100k": movielens.NAME, "ml100k": movielens.NAME}


def raw_search_path(settings: Settings) -> list[Path]:
    """Folders that may hold raw ml-100k files: DXPLAIN_DATA, then ../shared/data beside the checkout or cwd."""
    roots = []
    if settings.data:
        roots.append(Path(settings.data))
    repo = Path(__file__).resolve().parents[2]
    roots += [repo.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    found = []
    for root in roots:
        for sub in ("ml-100k", "ml-100k-grouplens", ""):
            folder = root / sub if sub else root
            if folder.is_dir() and movielens.layout(folder) in movielens.ML100K:
                found.append(folder)
    return found


def find_raw_movielens(settings: Settings) -> Path | None:
    found = raw_search_path(settings)
    return found[0] if found else None


def fetch_movielens(settings: Settings) -> Path:
    """Make sure raw ml-100k files are on this machine; return their folder."""
    local = find_raw_movielens(settings)
    if local is not None:
        return local
    dest = Path(settings.data_home) / "raw" / "ml-100k"
    if movielens.layout(dest) in movielens.ML100K:
        return dest
    return movielens.fetch(dest)


def check_dataset(name_or_path: str) -> None:
    """Fail at once on a dataset that is neither a known name nor an existing local path (the cheap check a
    command runs before any flow starts; URLs are checked when read)."""
    if ALIASES.get(name_or_path.lower()) is None and is_local(name_or_path) and not Path(name_or_path).exists():
        raise InputError(
            f"--dataset {name_or_path!r}: not a known dataset name ({sorted(set(ALIASES.values()))}) "
            "nor an existing path; give a prepared folder, a Parquet/CSV file or a known name"
        )


def resolve_dataset(name_or_path: str, settings: Settings | None = None, fetch: bool = True) -> Dataset:
    """Load a dataset by name (``movielens-100k``) or path (prepared folder, Parquet or CSV file)."""
    settings = settings or Settings.from_env()
    name = ALIASES.get(name_or_path.lower())
    if name is None:
        if not is_local(name_or_path):  # an fsspec URL (memory://, s3://…): read_dataset checks it exists
            return read_dataset(name_or_path)
        check_dataset(name_or_path)
        return read_dataset(Path(name_or_path))
    prepared = Path(settings.data_home) / "datasets" / name
    if (prepared / "interactions.parquet").exists():
        return read_dataset(prepared)
    raw_folder = find_raw_movielens(settings)
    if raw_folder is None:
        if not fetch:
            raise InputError(
                f"{name}: raw files not found in DXPLAIN_DATA or ../shared/data; "
                "run `dxplain datasets fetch movielens-100k`"
            )
        raw_folder = fetch_movielens(settings)
    log.info("preparing %s from %s into %s", name, raw_folder, prepared)
    return movielens.prepare(raw_folder, prepared)


def resolve_prepared(name_or_path: str, settings: Settings | None = None) -> Location | None:
    """The prepared folder (interactions.parquet, users.parquet, items.parquet) behind a dataset name, path or URL
    (``s3://…``: tasks read it where they run), a named one prepared first; None for a bare file or a folder of
    other files, which are loaded whole."""
    settings = settings or Settings.from_env()
    name = ALIASES.get(name_or_path.lower())
    if name is None:
        if not is_local(name_or_path):
            fs, path = filesystem(name_or_path)
            return name_or_path.rstrip("/") if all(fs.isfile(f"{path}/{f}") for f in PREPARED_FILES) else None
        check_dataset(name_or_path)
        folder = Path(name_or_path)
        return folder if all((folder / f).exists() for f in PREPARED_FILES) else None
    prepared = Path(settings.data_home) / "datasets" / name
    if not (prepared / "interactions.parquet").exists():
        resolve_dataset(name_or_path, settings)
    return prepared


def resolve_catalogue(name_or_path: str, settings: Settings | None = None):
    """The (users, items) tables of a dataset by name or path, without its interactions (``read_catalogue``).

    A named dataset not prepared yet is prepared first (small: the named ones are MovieLens)."""
    settings = settings or Settings.from_env()
    name = ALIASES.get(name_or_path.lower())
    if name is None:
        if not is_local(name_or_path):
            return read_catalogue(name_or_path)
        check_dataset(name_or_path)  # a path that is not there is named, as when loading the data
        return read_catalogue(Path(name_or_path))
    prepared = Path(settings.data_home) / "datasets" / name
    if not (prepared / "interactions.parquet").exists():
        resolve_dataset(name_or_path, settings, fetch=False)
    return read_catalogue(prepared)
