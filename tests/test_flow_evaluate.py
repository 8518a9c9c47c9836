"""The case-deletion flow and CLI: outputs, Prefect caching of finished trials, bad input."""

import csv
import json

import pytest
from conftest import only_run

from dxplain.cli import main
from dxplain.flows.evaluate import evaluate

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_cli_writes_curves_and_auc_table(tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        main(
            [
                "evaluate",
                "--dataset",
                "synthetic-small",
                "--trials",
                "2",
                "--targets",
                "3",
                "--in-memory",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "AUC-DEL₊" in capsys.readouterr().out
    folder = only_run(out, "evaluations")
    rows = list(csv.DictReader(open(folder / "deletions.csv")))
    summary = json.loads((folder / "summary.json").read_text())
    assert len(rows) == summary["retrainings"] and {r["trial"] for r in rows} == {"0", "1"}
    assert {r["method"] for r in rows} == {"l1-representer", "l2-representer", "influence", "random"}
    assert {r["fraction"] for r in rows} == {"0.01", "0.02", "0.03", "0.04", "0.05"}
    md = (folder / "auc_del.md").read_text()
    assert md.count("\n| ") == 5  # header + 4 methods


def test_rerun_reuses_cached_trials(tmp_path, monkeypatch):
    import dxplain.flows.evaluate as F

    built = []
    real = F.trial_case
    monkeypatch.setattr(F, "trial_case", lambda X, y, trial, *a: built.append(trial) or real(X, y, trial, *a))
    out = str(tmp_path / "out")
    first = evaluate(dataset="synthetic-small", trials=2, targets=2, out=out, in_memory=True)
    assert built == [0, 1]
    # As after an interruption: the finished trials come from Prefect's cache, only the new one runs.
    second = evaluate(dataset="synthetic-small", trials=3, targets=2, out=out, in_memory=True)
    assert built == [0, 1, 2]
    a = list(csv.DictReader(open(f"{first['folder']}/deletions.csv")))
    b = [r for r in csv.DictReader(open(f"{second['folder']}/deletions.csv")) if r["trial"] in ("0", "1")]
    assert a == b


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "mnist"], "--dataset 'mnist'"),
        (["--trials", "0"], "--trials 0"),
        (["--model", "bpr"], "--model 'bpr'"),
    ],
)
def test_bad_options_are_named_and_nothing_is_written(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert main(["evaluate", "--in-memory", "--out", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
