"""Write-then-rename helpers: a reader never sees a partial file or folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

import fsspec.core

from ..errors import InputError

# A local folder or file (Path or plain path string), or an fsspec URL such as memory://… or s3://….
Location = str | os.PathLike

# An object store that restarts or sheds load (503 SlowDown) gets botocore's standard retries, 10 attempts with
# exponential backoff (about a minute of waiting), before the run stops with a named error (``errors.
# store_unreachable``); the S3 clients of the flow and of every worker read these when they are made. A user's own
# AWS_RETRY_MODE or AWS_MAX_ATTEMPTS wins.
if "AWS_RETRY_MODE" not in os.environ and "AWS_MAX_ATTEMPTS" not in os.environ:
    os.environ.update({"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "10"})


def is_local(loc: Location) -> bool:
    return "://" not in str(loc) or str(loc).startswith("file://")


def join(base: Location, *names: str) -> Location:
    """``base/names…``: a Path for local locations, a URL string otherwise (so it survives pickling to workers)."""
    if is_local(base):
        return Path(str(base).removeprefix("file://")).joinpath(*names)
    return "/".join([str(base).rstrip("/"), *names])


def filesystem(loc: Location):
    """(fsspec filesystem, path within it) for a location; a URL whose filesystem is not installed is an
    ``InputError`` naming what to install."""
    try:
        return fsspec.core.url_to_fs(str(loc))
    except ImportError as e:
        extra = " (dxplain's s3 extra: pip install -e '.[s3]')" if str(loc).startswith(("s3://", "s3a://")) else ""
        raise InputError(f"{loc}: {e}{extra}") from None


def exists(loc: Location) -> bool:
    fs, path = filesystem(loc)
    return fs.exists(path)


def read_text(loc: Location) -> str:
    fs, path = filesystem(loc)
    return fs.cat_file(path).decode()


def _tmp_name(name: str) -> str:
    return f".{name}.tmp-{uuid.uuid4().hex[:8]}"


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(_tmp_name(path.name))


def _remote_sibling(loc: Location) -> tuple:
    """(fs, path of loc, URL and path of a fresh temporary sibling) for a non-local location."""
    parent, name = str(loc).rstrip("/").rsplit("/", 1)
    tmp_url = f"{parent}/{_tmp_name(name)}"
    fs, path = filesystem(loc)
    return fs, path, tmp_url, filesystem(tmp_url)[1]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary sibling of ``path``; on success rename it over ``path``, else remove it.

    Works for files and folders alike. The rename is atomic on POSIX file systems because the
    temporary lives in the same folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():
            # os.replace cannot replace a non-empty folder: move the old one aside first.
            old = _tmp_sibling(path)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_file(loc: Location):
    """Yield a binary file open on a temporary sibling of ``loc``; on success move it onto ``loc``.

    Local files are fsynced and renamed (atomic on POSIX). On other fsspec file systems the
    temporary is written whole and then moved; on object stores each object appears whole or not
    at all, and the move is a copy, so a half-written object is never at ``loc``.
    """
    if is_local(loc):
        with atomic_path(join(loc)) as tmp:
            with open(tmp, "wb") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
        return
    fs, path, _, tmp = _remote_sibling(loc)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    try:
        with fs.open(tmp, "wb") as fh:
            yield fh
        fs.mv(tmp, path)
    finally:
        if fs.exists(tmp):
            fs.rm(tmp)


@contextlib.contextmanager
def atomic_dir(loc: Location):
    """Yield a temporary sibling folder of ``loc`` (Path or URL) that replaces ``loc`` on success."""
    if is_local(loc):
        with atomic_path(join(loc)) as tmp:
            yield tmp
        return
    fs, path, tmp_url, tmp = _remote_sibling(loc)
    try:
        yield tmp_url
        publish_prefix(fs, tmp, path)
    finally:
        fs.invalidate_cache()
        if fs.exists(tmp):
            fs.rm(tmp, recursive=True)


def _is_metadata(name: str) -> bool:
    return name.rsplit("/", 1)[-1] in {"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"} or name.endswith(
        ".json"
    )


def publish_prefix(fs, tmp: str, path: str) -> None:
    """Replace the folder ``path`` by ``tmp`` on a file system that may have no folders (S3, GCS): each
    object of ``tmp`` is copied to its place under ``path`` (the data first, the metadata files that
    make a reader open it last), then the objects of the old ``path`` that the new one does not have are
    removed. A folder rename (``fs.mv``) is a copy of every key on object stores, and s3fs's recursive one
    lists through its cache and fails on keys other processes wrote. On an object store a reader that
    opens ``path`` during the copy may see old and new objects side by side: see docs/operations.md."""
    fs.invalidate_cache()
    sources = sorted(fs.find(tmp), key=lambda k: (_is_metadata(k), k))
    if not sources:
        raise FileNotFoundError(f"{tmp}: nothing was written to publish")
    old = set(fs.find(path)) if fs.exists(path) else set()
    new = set()
    for src in sources:
        dst = path + src[len(tmp) :]
        fs.copy(src, dst)
        new.add(dst)
    stale = sorted(old - new)
    if stale:
        fs.rm(stale)
    fs.invalidate_cache()


def write_text_atomic(path: Location, text: str) -> None:
    with atomic_file(path) as fh:
        fh.write(text.encode())
