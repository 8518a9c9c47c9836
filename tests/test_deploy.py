"""The deployment files point at the real flow with parameters it accepts and a valid nightly cron."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_prefect_deployment_entrypoint_parameters_and_schedule():
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    (dep,) = spec["deployments"]
    flow = load_flow_from_entrypoint(str(ROOT / dep["entrypoint"]))
    assert flow.name == "dxplain-refresh"
    flow.validate_parameters(dep["parameters"])  # raises on unknown or ill-typed parameters
    (sched,) = dep["schedules"]
    assert CronSchedule(cron=sched["cron"], timezone=sched["timezone"]).cron == "0 2 * * *"


def test_dask_config_is_valid_yaml_with_memory_limits():
    cfg = yaml.safe_load((ROOT / "deploy" / "dask.yaml").read_text())
    mem = cfg["distributed"]["worker"]["memory"]
    assert 0 < mem["target"] < mem["spill"] < mem["pause"] < mem["terminate"] < 1
