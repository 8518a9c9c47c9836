"""MovieLens-100k (and -1M): ratings, titles, years, genres and user features.

Reads the GroupLens layout (``u.data``, ``u.item``, ``u.user``), RecBole's atomic files
(``ml-100k.inter``, ``.item``, ``.user``) or MovieLens-1M's GroupLens files (``ratings.dat``,
``movies.dat``, ``users.dat``, ``::``-separated), and produces a prepared dataset (see ``io.dataset_folders``).
Item features: ``title`` (without the year), ``year``, ``genres`` (list of strings).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..io import raw
from ..io.dataset_folders import Dataset, write_dataset

log = logging.getLogger(__name__)
NAME = "movielens-100k"
GENRES = [
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
]
GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
RECBOLE_WHEEL = "recbole==1.2.1"


ML100K = ("grouplens", "recbole")  # the layouts that hold ml-100k (ml-1m's is "grouplens-1m")


def layout(folder: Path) -> str | None:
    """'grouplens', 'recbole' or None for a folder of raw files."""
    if (folder / "u.data").exists():
        return "grouplens"
    if (folder / "ml-100k.inter").exists():
        return "recbole"
    if (folder / "ratings.dat").exists():
        return "grouplens-1m"
    return None


def _split_title(full: pa.Array) -> tuple[pa.Array, pa.Array]:
    titles, years = [], []
    for t in full.to_pylist():
        m = re.match(r"^(.*?)\s*\((\d{4})\)\s*$", t or "")
        titles.append(m.group(1) if m else (t or ""))
        years.append(int(m.group(2)) if m else None)
    return pa.array(titles), pa.array(years, type=pa.int32())


def read_grouplens(folder: Path) -> tuple[pa.Table, pa.Table, pa.Table]:
    inter = raw.read_delimited(
        folder / "u.data",
        ["user", "item", "rating", "timestamp"],
        "\t",
        column_types={"user": pa.int64(), "item": pa.int64(), "rating": pa.float64()},
    )
    names = ["id", "full_title", "release", "video", "url", *GENRES]
    it = raw.read_delimited(
        folder / "u.item", names, "|", encoding="latin-1", column_types={"id": pa.int64(), "full_title": pa.string()}
    )
    title, year = _split_title(it.column("full_title").combine_chunks())
    flags = [it.column(g).to_pylist() for g in GENRES]
    genres = [[g for g, f in zip(GENRES, row) if f] for row in zip(*flags)]
    items = pa.table({"id": it.column("id"), "title": title, "year": year, "genres": pa.array(genres)})
    us = raw.read_delimited(
        folder / "u.user",
        ["id", "age", "gender", "occupation", "zip"],
        "|",
        column_types={"id": pa.int64(), "zip": pa.string()},
    )
    return inter, us, items


def read_recbole(folder: Path) -> tuple[pa.Table, pa.Table, pa.Table]:
    inter = raw.read_delimited(
        folder / "ml-100k.inter",
        None,
        "\t",
        column_types={
            "user_id:token": pa.int64(),
            "item_id:token": pa.int64(),
            "rating:float": pa.float64(),
            "timestamp:float": pa.int64(),
        },
    )
    inter = inter.rename_columns(["user", "item", "rating", "timestamp"])
    it = raw.read_delimited(
        folder / "ml-100k.item",
        None,
        "\t",
        column_types={
            "item_id:token": pa.int64(),
            "movie_title:token_seq": pa.string(),
            "release_year:token": pa.string(),
            "class:token_seq": pa.string(),
        },
    )
    # The year column holds a few non-years ('unkonwn', 'V'); fall back to a "(1995)" in the title.
    title, title_year = _split_title(it.column("movie_title:token_seq").combine_chunks())
    year = [
        int(y) if y and y.isdigit() else ty
        for y, ty in zip(it.column("release_year:token").to_pylist(), title_year.to_pylist())
    ]
    genres = pc.split_pattern(pc.fill_null(it.column("class:token_seq"), ""), " ")
    items = pa.table(
        {"id": it.column("item_id:token"), "title": title, "year": pa.array(year, type=pa.int32()), "genres": genres}
    )
    us = raw.read_delimited(
        folder / "ml-100k.user", None, "\t", column_types={"user_id:token": pa.int64(), "zip_code:token": pa.string()}
    )
    us = us.rename_columns(["id", "age", "gender", "occupation", "zip"])
    return inter, us, items


def read_grouplens_1m(folder: Path) -> tuple[pa.Table, pa.Table, pa.Table | None]:
    """MovieLens-1M's ``ratings.dat``, ``movies.dat`` (titles, ``|``-separated genres) and ``users.dat``."""
    inter = raw.read_delimited(
        folder / "ratings.dat",
        ["user", "item", "rating", "timestamp"],
        "::",
        column_types={"user": pa.int64(), "item": pa.int64(), "rating": pa.float64()},
    )
    items = users = None
    if (folder / "movies.dat").exists():
        it = raw.read_delimited(
            folder / "movies.dat",
            ["id", "full_title", "genres"],
            "::",
            encoding="latin-1",
            column_types={"id": pa.int64(), "full_title": pa.string(), "genres": pa.string()},
        )
        title, year = _split_title(it.column("full_title").combine_chunks())
        items = pa.table(
            {"id": it.column("id"), "title": title, "year": year, "genres": pc.split_pattern(it.column("genres"), "|")}
        )
    if (folder / "users.dat").exists():
        users = raw.read_delimited(
            folder / "users.dat",
            ["id", "gender", "age", "occupation", "zip"],
            "::",
            column_types={"id": pa.int64(), "zip": pa.string()},
        )
    return inter, users, items


READERS = {"grouplens": read_grouplens, "recbole": read_recbole, "grouplens-1m": read_grouplens_1m}


def prepare(raw_folder: Path, out: Path) -> Dataset:
    """Turn a folder of raw MovieLens files (any layout in ``READERS``) into a prepared dataset at ``out``."""
    kind = layout(raw_folder)
    if kind is None:
        raise InputError(
            f"{raw_folder}: holds neither GroupLens (u.data, ratings.dat) nor RecBole (ml-100k.inter) files"
        )
    inter, users, items = READERS[kind](raw_folder)
    log.info("movielens: %d ratings from %s (%s layout)", inter.num_rows, raw_folder, kind)
    return write_dataset(out, inter, users, items, source=str(raw_folder))


def fetch(dest: Path) -> Path:
    """Download the raw files into ``dest``: GroupLens where reachable, else the recbole wheel's copy."""
    try:
        blob = raw.download(GROUPLENS_URL)
        raw.extract_zip_members(blob, {f"ml-100k/{n}": n for n in ("u.data", "u.item", "u.user")}, dest)
        log.info("fetched ml-100k from GroupLens into %s", dest)
        return dest
    except OSError as exc:
        log.info("GroupLens not reachable (%s); taking ml-100k from the %s wheel", exc, RECBOLE_WHEEL)
    blob = raw.pip_download_wheel(RECBOLE_WHEEL)
    names = ("ml-100k.inter", "ml-100k.item", "ml-100k.user")
    raw.extract_zip_members(blob, {f"recbole/dataset_example/ml-100k/{n}": n for n in names}, dest)
    log.info("fetched ml-100k from the %s wheel into %s", RECBOLE_WHEEL, dest)
    return dest
