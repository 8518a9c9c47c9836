"""One writer per output folder (``io.lock``): a second refresh waits or refuses, a killed holder's lock is taken
over, and two refreshes started together each publish the table a single refresh publishes."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.errors import InputError
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.io.lock import LOCK, out_lock

KEYS = [(c, "ascending") for c in ("user", "item", "train_user", "train_item")]  # unique per row


def hold(out, seconds: float) -> subprocess.Popen:
    """Another process holding ``out``'s lock for ``seconds`` (then releasing it as a finished writer does)."""
    code = textwrap.dedent(
        f"""
        import time
        from dxplain.io.lock import out_lock
        with out_lock({str(out)!r}, wait=0, what="test holder"):
            time.sleep({seconds})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if json.loads((out / LOCK).read_text())["pid"] == proc.pid:
                return proc
        except (OSError, ValueError, KeyError):
            pass
        assert proc.poll() is None, f"the holder exited ({proc.returncode}) before taking the lock"
        time.sleep(0.02)
    raise AssertionError("the holder never took the lock")


def test_a_second_writer_refuses_naming_the_holder_and_takes_over_a_killed_one(tmp_path):
    out = tmp_path / "out"
    holder = hold(out, 600)
    try:
        with pytest.raises(InputError, match=f"pid {holder.pid} on .*waited 0.5 s"):
            with out_lock(out, wait=0.5):
                pytest.fail("two writers held the lock")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with out_lock(out, wait=0) as killed:  # the kernel dropped the dead holder's lock: no wait
        assert killed["pid"] == holder.pid and killed["state"] == "running"
        assert json.loads((out / LOCK).read_text())["pid"] == os.getpid()
    assert not (out / LOCK).exists()  # a finished writer leaves nothing behind


def test_a_waiting_writer_gets_the_lock_when_the_holder_finishes(tmp_path):
    out = tmp_path / "out"
    holder = hold(out, 2.0)
    seen = time.monotonic()  # the holder took the lock before this and keeps it for 2 s
    with out_lock(out, wait=60) as killed:
        assert time.monotonic() - seen > 1.5  # we waited for it
        assert killed is None  # it released the lock: not taken over
    assert holder.wait(timeout=60) == 0
    assert not out.exists()  # it created the folder, we wrote nothing in it: gone with the lock


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data") / "small"
    write_dataset(folder, interactions_table(random_interactions(60, 40, 0.25, seed=4)))
    return ["--dataset", str(folder), "--k", "4", "--in-memory"]


@pytest.mark.usefixtures("prefect_server")
def test_a_refresh_refuses_while_another_holds_the_folder_and_writes_nothing(tmp_path, small, capsys):
    out = tmp_path / "out"
    holder = hold(out, 600)
    try:
        assert main(["refresh", "--out", str(out), *small, "--lock-wait", "0"]) == 2
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    err = capsys.readouterr().err
    assert f"pid {holder.pid}" in err and "--lock-wait" in err, err
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # only the dead holder's lock: no run, no store


@pytest.mark.usefixtures("prefect_server")
def test_a_refresh_after_a_killed_one_takes_over_and_publishes_a_clean_runs_table(tmp_path, small, caplog):
    assert main(["refresh", "--out", str(tmp_path / "clean"), *small]) == 0
    out = tmp_path / "out"
    holder = hold(out, 600)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert main(["refresh", "--out", str(out), *small, "--lock-wait", "0"]) == 0
    assert f"pid {holder.pid}" in caplog.text and "taking over" in caplog.text
    got = runs.open_run(runs.resolve_run(out)).to_table().sort_by(KEYS)
    assert got.equals(runs.open_run(runs.resolve_run(tmp_path / "clean")).to_table().sort_by(KEYS))
    assert not (out / LOCK).exists()


@pytest.mark.slow
def test_two_refreshes_started_together_each_publish_a_single_refreshs_table(tmp_path, small):
    """Two `dxplain refresh` processes on one --out at once: one waits for the other; each publishes a run, and
    both runs hold the rows a single refresh publishes."""
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    logs = [tmp_path / f"refresh-{n}.log" for n in range(2)]
    procs = []
    for log in logs:
        with open(log, "wb") as fh:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "dxplain.cli", "refresh", "--out", str(out), *small],
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            )
    for proc, log in zip(procs, logs):
        assert proc.wait(timeout=900) == 0, log.read_text()[-3000:]
    assert sum("waiting up to" in log.read_text() for log in logs) == 1
    published = sorted((out / "runs").iterdir())
    assert len(published) == 2 and all(runs.manifest_path(r) is not None for r in published)
    a, b = (runs.open_run(r).to_table().sort_by(KEYS) for r in published)
    assert a.equals(b) and a.num_rows > 0
    assert not (out / LOCK).exists()
