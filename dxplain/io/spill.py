"""Arrays kept in files, not in memory, where they would not fit a process's budget.

``SpillList``: at 50M interactions (k = 64) the Anderson history of ``kernels.anderson.Anderson`` is 20
float32 arrays of 32 MB: 0.6 GB beside the factors, against a 1.5 GiB budget for the whole flow. Kept
here, an item is read back (a plain read, not a memory map, so it never counts in the process's
resident set) when it is used, one at a time: ~3m arrays a sweep, from the page cache, against a sweep
of tens of seconds.

Task files (``save_file``, ``save_arrays``, ``scratch_folder``): what tasks pass each other through a
folder the workers share, e.g. the row blocks of factor matrices no process holds whole
(``io.row_blocks``). Each is written whole or not at all. The folder is local (or network-mounted), or a prefix
under an fsspec URL (``s3://…``) for workers that share no disk: there a file is one object, read whole.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import tempfile
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .atomic import atomic_path, filesystem, is_local, join, read_text, write_text_atomic


class SpillList:
    """``append``, ``pop(0)``, ``len`` and iteration over arrays stored one file each in a private
    temporary folder (removed by ``close``, when the list is collected, or at the process's exit). A
    process that cannot clean up (killed, or ended by Ctrl-C's ``os._exit``) leaves its folder behind;
    the next list made in the same place removes it (``_remove_orphans``), as with scratch folders."""

    def __init__(self, folder: str | Path | None = None):
        base = Path(folder) if folder is not None else Path(tempfile.gettempdir())
        _remove_orphans(base, SPILL_PREFIX)
        self.root = _owned_folder(base, SPILL_PREFIX)
        self.files: list[Path] = []
        self._next = 0
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.root, True)

    def append(self, a: np.ndarray) -> None:
        path = self.root / f"{self._next:08d}.npy"
        self._next += 1
        np.save(path, np.ascontiguousarray(a), allow_pickle=False)
        self.files.append(path)

    def pop(self, index: int = -1) -> None:
        """Drop an item (its file is deleted).

        Returns nothing, unlike ``list.pop``: reading it back would cost a read.
        """
        self.files.pop(index).unlink()

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[np.ndarray]:
        for path in list(self.files):
            yield np.load(path, allow_pickle=False)

    def close(self) -> None:
        self._finalizer()
        self.files = []


def save_file(path, a: np.ndarray) -> str:
    """Write ``a`` to the .npy file ``path`` (a task's result), whole or not at all (``atomic.atomic_path``):
    a task rerun after its worker died mid-write rewrites it, and no reader sees half of it. No fsync:
    these files last one run. Returns the path, as a string."""
    if not is_local(path):
        with _put(path) as fh:
            np.save(fh, np.ascontiguousarray(a), allow_pickle=False)
        return str(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(a), allow_pickle=False)
    return str(path)


def _put(path: str):
    """A remote file written straight to its place: an object store's PUT (or a multipart upload's completion) is
    all or nothing, so no reader meets half an object, and a temporary object would cost a copy more per file."""
    fs, p = filesystem(path)
    return fs.open(p, "wb")


def _remote_bytes(path: str) -> io.BytesIO:
    fs, p = filesystem(path)
    return io.BytesIO(fs.cat_file(p))


def load(path: str, mmap: bool = False) -> np.ndarray:
    """An array written by ``save_file``; ``mmap`` maps a local one (only the pages read become resident)."""
    if not is_local(path):
        return np.load(_remote_bytes(path), allow_pickle=False)
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def save_arrays(path, **arrays: np.ndarray) -> str:
    """Several named arrays as one file (uncompressed .npz), whole or not at all, as ``save_file``."""
    if not is_local(path):
        with _put(path) as fh:
            np.savez(fh, **arrays)
        return str(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    return str(path)


def load_arrays(path: str) -> dict[str, np.ndarray]:
    with np.load(path if is_local(path) else _remote_bytes(path), allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def remove(paths) -> None:
    paths = list(paths)
    remote = [p for p in paths if not is_local(p)]
    for path in paths:
        if is_local(path):
            Path(path).unlink(missing_ok=True)
    if remote:
        fs, _ = filesystem(remote[0])
        present = [q for q in (filesystem(p)[1] for p in remote) if fs.exists(q)]
        if present:
            fs.rm(present)


def scratch_folder(root):
    """A fresh private folder under ``root``, a local folder the workers share (they read their parts from
    there) or a URL prefix beside the parts, for the files tasks pass each other. Folders of runs whose process
    is gone (killed, crashed) are removed first."""
    if not is_local(root):
        _remove_remote_orphans(root, SCRATCH_PREFIX)
        folder = join(root, f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}")
        write_text_atomic(join(folder, OWNER), f"{socket.gethostname()} {os.getpid()}")
        return folder
    base = Path(str(root).removeprefix("file://"))
    base.mkdir(parents=True, exist_ok=True)
    _remove_orphans(base, SCRATCH_PREFIX)
    return _owned_folder(base, SCRATCH_PREFIX)


def _remove_remote_orphans(root, prefix: str) -> None:
    """``_remove_orphans`` for a URL prefix: its scratch folders whose owner, a process on this host, is gone."""
    fs, base = filesystem(root)
    if not fs.exists(base):
        return
    host = socket.gethostname()
    for entry in fs.ls(base, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if not name.startswith(prefix):
            continue
        folder = join(root, name)
        try:
            owner_host, pid = read_text(join(folder, OWNER)).split()
        except (OSError, ValueError):
            continue  # being created, or not ours to judge
        if owner_host == host and not _alive(int(pid)):
            remove_folder(folder)


SCRATCH_PREFIX, SPILL_PREFIX, OWNER = ".dxplain-scratch-", "dxplain-spill-", "owner"


def _owned_folder(base: Path, prefix: str) -> Path:
    """A fresh private folder under ``base`` naming its owner (this host and process) in ``OWNER``."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    (folder / OWNER).write_text(f"{socket.gethostname()} {os.getpid()}")
    return folder


def _remove_orphans(base: Path, prefix: str) -> None:
    """Remove the folders ``prefix``* under ``base`` whose owner, a process on this host, is gone: a run
    killed before it could clean up leaves gigabytes of files at Amazon scale. Another host's, or a live
    process's, are left alone, and so is a folder without an owner (being created, or not ours to judge)."""
    host = socket.gethostname()
    for folder in base.glob(prefix + "*"):
        try:
            owner_host, pid = (folder / OWNER).read_text().split()
        except (OSError, ValueError):
            continue  # being created, or not ours to judge
        if owner_host == host and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_folder(folder) -> None:
    if is_local(folder):
        shutil.rmtree(folder, ignore_errors=True)
        return
    fs, path = filesystem(folder)
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass
