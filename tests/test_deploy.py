"""The deployment files point at the real flow with parameters it accepts and a valid nightly cron."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_prefect_deployment_entrypoint_parameters_and_schedule():
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    deps = {d["name"]: d for d in spec["deployments"]}
    want = {"nightly-refresh": ("dxplain-refresh", "0 2 * * *"),
            "weekly-false-negatives": ("dxplain-negatives", "0 4 * * 0")}
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
