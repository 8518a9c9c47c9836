"""A fit's finished stages kept beside its ``--out``, so a rerun of the same command resumes after them.

    <out's parent>/.<out's name>.checkpoint/plan.json      what the stages were computed from
                                           /<stage>.json    one finished stage's result, written atomically

The plan is the inputs' files (path, size, modification time) and the fit's settings; a rerun whose plan
differs starts afresh (the old stages are dropped and the log says so). The folder is removed once the
output is in place, so it only ever exists after a fit that did not finish. ``NoCheckpoints`` keeps nothing
(a library call, or a fit asked not to resume).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .atomic import write_text_atomic
from .runs import plan_key


def files_signature(*paths: str | None) -> list:
    """(path, size, mtime) of every file the given files and folders hold: a cheap "same inputs" check."""
    out = []
    for p in paths:
        if p is None:
            continue
        p = Path(p)
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                st = f.stat()
                out.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    return out


class NoCheckpoints:
    def load(self, stage: str) -> dict | None:
        return None

    def save(self, stage: str, result: dict) -> None:
        pass

    def clear(self) -> None:
        pass


class Checkpoints(NoCheckpoints):
    def __init__(self, out: str | os.PathLike, plan: dict, log=print):
        out = Path(out)
        self.folder = out.parent / f".{out.name}.checkpoint"
        self.key = plan_key(plan)
        self.log = log
        plan_file = self.folder / "plan.json"
        if self.folder.is_dir():
            found = json.loads(plan_file.read_text()).get("key") if plan_file.exists() else None
            if found != self.key:
                log(f"{self.folder}: an unfinished fit of other inputs or settings; starting afresh")
                shutil.rmtree(self.folder)
        self.plan = {"key": self.key, **plan}

    def load(self, stage: str) -> dict | None:
        f = self.folder / f"{stage}.json"
        if not f.exists():
            return None
        self.log(f"resuming: stage '{stage}' from {f}")
        return json.loads(f.read_text())

    def save(self, stage: str, result: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        plan_file = self.folder / "plan.json"
        if not plan_file.exists():
            write_text_atomic(plan_file, json.dumps(self.plan, indent=1, default=str))
        write_text_atomic(self.folder / f"{stage}.json", json.dumps(result, indent=1, default=float))

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
