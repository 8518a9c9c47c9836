"""The deployment files point at the real flow with parameters it accepts and a valid nightly cron; the
nightly demo (deploy/nightly-demo.sh) publishes a run that the server's scheduler started."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_prefect_deployment_entrypoint_parameters_and_schedule():
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    deps = {d["name"]: d for d in spec["deployments"]}
    want = {
        "nightly-refresh": ("dxplain-refresh", "0 2 * * *"),
        "weekly-false-negatives": ("dxplain-negatives", "0 4 * * 0"),
    }
    assert set(deps) == set(want)
    for name, (flow_name, cron) in want.items():
        dep = deps[name]
        flow = load_flow_from_entrypoint(str(ROOT / dep["entrypoint"]))
        assert flow.name == flow_name
        flow.validate_parameters(dep["parameters"])  # raises on unknown or ill-typed parameters
        (sched,) = dep["schedules"]
        assert CronSchedule(cron=sched["cron"], timezone=sched["timezone"]).cron == cron


def test_dask_config_is_valid_yaml_with_memory_limits():
    cfg = yaml.safe_load((ROOT / "deploy" / "dask.yaml").read_text())
    mem = cfg["distributed"]["worker"]["memory"]
    assert 0 < mem["target"] < mem["spill"] < mem["pause"] < mem["terminate"] < 1
    # A deployed cluster's workers keep glibc's dynamic mmap threshold, as a LocalCluster's do.
    assert cfg["distributed"]["nanny"]["pre-spawn-environ"] == {"MALLOC_TRIM_THRESHOLD_": None}


def test_installed_prefect_stack_satisfies_the_pins():
    """The server's scheduler needs SQLAlchemy 2.0 (pyproject.toml says why): an environment installed before
    the pin, or by hand, silently never starts a scheduled run. Reinstall with `pip install -e .`."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    pins = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    for req in pins:
        if req.name in ("prefect", "fastapi", "sqlalchemy"):
            assert req.specifier.contains(version(req.name)), f"{req.name} {version(req.name)} is outside {req}"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_nightly_demo_publishes_a_scheduled_run_and_a_second_night(tmp_path):
    """deploy/nightly-demo.sh: server, pool, deployment and worker; the server's scheduler starts the first night,
    which publishes; the second night, on an appended day, starts warm and the diff is printed; nothing in the
    output is a traceback (the shutdown CommClosedError of issue #23)."""
    from dxplain.io.runs import open_run, read_manifest, resolve_run

    venv_bin = str(Path(sys.executable).parent)  # `prefect` and `python` of this environment
    env = {
        **os.environ,
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "DXPLAIN_HOME": str(tmp_path / "home"),
    }
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(ROOT / "deploy" / "nightly-demo.sh"), str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert "scheduled run" in output and ": Completed" in output, output[-3000:]
    # the second night, on the appended day: warm-started, and the diff says what changed
    assert "the second night completed" in output and "users' recommendations changed" in output, output[-3000:]
    assert len(list((out / "runs").iterdir())) == 2
    run = resolve_run(str(out))
    start = read_manifest(run)["summary"]["training_start"]
    assert start["start"] == "warm" and start["rows_added"] == 1000, start
    shards = read_manifest(run)["shards"]
    assert shards and sum(s["rows"] for s in shards) == open_run(run).count_rows() > 0
    for bad in ("CommClosedError", "Traceback"):
        assert bad not in output, output
