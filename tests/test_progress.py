"""Progress lines on a terminal, and a short log elsewhere (-q: warnings only)."""

import io
import os
import subprocess
import sys

import pytest
from conftest import interactions_table, random_interactions

from dxplain import progress
from dxplain.io.dataset_folders import write_dataset
from dxplain.models.als.trainer import ALSMF


def test_terminal_line_redraws_one_line_per_stage():
    out = io.StringIO()
    line = progress.TerminalLine(out, width=10, fps=1e9)
    line("train: ALS sweeps", 1, 4, "‖∇f‖=1.0e-01")
    line("train: ALS sweeps", 4, 4, "‖∇f‖=1.0e-05")
    line("explain: shard", 2, 8, "")
    line.close()
    frames = out.getvalue().split("\r\x1b[2K")[1:]
    assert frames[0].startswith("train: ALS sweeps [##........] 1/4 ‖∇f‖=1.0e-01")
    assert frames[1].startswith("train: ALS sweeps [##########] 4/4 ‖∇f‖=1.0e-05") and frames[1].endswith("\n")
    assert frames[2].startswith("explain: shard [##........] 2/8") and frames[2].endswith("\n")


def test_a_skipped_redraw_is_shown_when_its_stage_ends():
    out = io.StringIO()
    line = progress.TerminalLine(out, width=4, fps=1e-9)  # never redraw for time alone
    line("scan", 1, 10, "")
    line("scan", 7, 10, "")  # rate-limited: not drawn now
    line.close()
    frames = out.getvalue().split("\r\x1b[2K")[1:]
    assert [f.split()[2] for f in frames] == ["1/10", "7/10"] and frames[-1].endswith("\n")


def test_training_reports_its_sweeps_and_newton_steps_with_the_gradient_norm():
    seen = []
    previous = progress.use(lambda stage, done, total, note: seen.append((stage, done, total, note)))
    try:
        m = ALSMF(k=3, lam=0.05, max_sweeps=8, seed=0).fit(random_interactions(30, 20, 0.4, seed=3))
    finally:
        progress.use(previous)
    sweeps = [s for s in seen if s[0] == "train: ALS sweeps"]
    newton = [s for s in seen if s[0] == "train: Newton steps"]
    assert [s[1] for s in sweeps] == list(range(1, m.info["sweeps"] + 1)) and all(s[2] == 8 for s in sweeps)
    assert len(newton) == m.info["newton_iters"] > 0
    assert newton[-1][3] == f"‖∇f‖={m.grad_norm:.1e}"


def _refresh(tmp_path, *flags, env_out=None):
    data = tmp_path / "data"
    if not data.exists():
        write_dataset(data, interactions_table(random_interactions(60, 40, 0.2, seed=5)))
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_LOGGING_EXTRA_LOGGERS", None)  # as a user runs it
    out = ["--out", str(tmp_path / "out")]
    if env_out:
        env["DXPLAIN_OUT"], out = str(env_out), []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dxplain.cli",
            *flags,
            "refresh",
            "--dataset",
            str(data),
            "--k",
            "3",
            "--lam",
            "5e-3",
            "--top-n",
            "2",
            "--in-memory",
            *out,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow  # two `dxplain refresh` processes, each starting its own Prefect server (33 s)
def test_the_log_of_a_refresh_is_short_and_quiet_means_quiet(tmp_path):
    """Not a terminal: no progress line, at most 20 log lines at the default level; -q prints no log."""
    default = _refresh(tmp_path)
    assert default.returncode == 0, default.stderr[-3000:]
    log = default.stderr.strip().splitlines()
    assert 3 <= len(log) <= 20, "\n".join(log)
    assert "\x1b[2K" not in default.stderr and "Finished in state Completed()" in default.stderr  # the flow's
    assert "refresh done:" in default.stderr
    quiet = _refresh(tmp_path, "-q", env_out=tmp_path / "elsewhere")
    assert quiet.returncode == 0 and quiet.stderr.strip() == "", quiet.stderr[-3000:]
    assert f"(LATEST in {tmp_path / 'elsewhere'} points here)" in quiet.stdout  # DXPLAIN_OUT, not the default
