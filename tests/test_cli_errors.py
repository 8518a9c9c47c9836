"""Bad options and inputs fail before any flow starts: exit 2, one line naming the value and the fix."""

import logging

import pytest

from dxplain.cli import main


@pytest.fixture
def no_flow(monkeypatch):
    """Fail the test if a flow would start: every check here must come first."""
    import dxplain.flows.negatives as N
    import dxplain.flows.prototypes as P
    import dxplain.flows.refresh as R

    class NotStarted:
        def __init__(self, flow):
            self.fn = flow.fn  # the signature and docstring the CLI builds its flags from

        def __call__(self, **kwargs):
            raise AssertionError(f"a flow started with {kwargs}")

    for module, name in ((R, "refresh"), (N, "negatives"), (P, "prototypes")):
        monkeypatch.setattr(module, name, NotStarted(getattr(module, name)))


@pytest.mark.parametrize(
    "argv, says",
    [
        (["refresh", "--top-n", "0"], "--top-n 0: give an integer ≥ 1"),
        (["refresh", "--top-k", "-1"], "--top-k -1: give an integer ≥ 0"),
        (["refresh", "--workers", "0"], "--workers 0: give an integer ≥ 1"),
        (["refresh", "--lam", "-1"], "--lam -1.0: give a number > 0"),
        (["refresh", "--dataset", "no/such/file.parquet"], "not a known dataset name"),
        (["negatives", "--percent", "0"], "--percent 0.0: give a number > 0 and ≤ 100"),
        (["negatives", "--method", "magic"], "--method 'magic': give one of representer, fia, loss, random"),
        (["prototypes", "--user", "1", "-m", "0"], "-m 0: give an integer ≥ 1"),
        (["refresh", "--scheduler", "tcp://127.0.0.1:9"], "cannot reach the Dask scheduler"),
        (["refresh", "--keep", "0"], "--keep 0: give an integer ≥ 1"),
        (["refresh", "--model", "no/such/model.zarr"], "--model no/such/model.zarr: no such model store"),
        (["train", "--out", "m.zarr", "--k=-2"], "-k -2: give an integer ≥ 1"),
        # a negative α would make the stored entries' confidences negative: refused like α = 0
        (["train", "--out", "m.zarr", "--model", "ials", "--alpha=-5"], "--alpha -5.0: give a number > 0"),
        (["train", "--out", "m.zarr", "--model", "ials", "--convention", "mllib"], "unknown iALS convention 'mllib'"),
        (["train", "--out", "m.zarr", "--model", "svd"], "--model 'svd': give one of mf, biased, ials, bce"),
        (["refresh", "--top-unobserved", "-1"], "--top-unobserved -1: give an integer ≥ 0"),
        (
            [
                "import-embeddings",
                "--dataset",
                "d",
                "--user-factors",
                "u",
                "--item-factors",
                "v",
                "--out",
                "m.zarr",
                "--lam",
                "-1",
            ],
            "--lam -1.0: give a number > 0",
        ),
        (["refresh", "--targets", "no/such/pairs.parquet"], "--targets no/such/pairs.parquet: no such file"),
    ],
)
def test_bad_option_is_one_line_and_exit_2(argv, says, no_flow, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and err.startswith("dxplain: error:") and len(err.splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "variable,raw,says",
    [
        ("DXPLAIN_WORKERS", "abc", "DXPLAIN_WORKERS='abc': give an integer ≥ 1"),
        ("DXPLAIN_WORKERS", "0", "DXPLAIN_WORKERS='0': give an integer ≥ 1"),
        ("DXPLAIN_BLAS_THREADS", "-1", "DXPLAIN_BLAS_THREADS='-1': give an integer ≥ 0"),
    ],
)
def test_bad_setting_in_the_environment_is_one_line_and_exit_2(variable, raw, says, no_flow, capsys, monkeypatch):
    monkeypatch.setenv(variable, raw)
    assert main(["refresh", "--top-n", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_an_url_whose_filesystem_is_not_installed_names_the_extra(no_flow, capsys):
    import importlib.util

    if importlib.util.find_spec("s3fs") is not None:
        pytest.skip("s3fs is installed here, so s3:// URLs are served")
    assert main(["refresh", "--out", "s3://bucket/dxplain"]) == 2
    err = capsys.readouterr().err.strip()
    assert "s3://bucket/dxplain" in err and "pip install -e '.[s3]'" in err and len(err.splitlines()) == 1


def _bad_data(tmp_path, kind):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = {"user": [1, 1, 2, 3], "item": [10, 11, 10, 12], "rating": [4.0, 3.0, 5.0, 1.0]}
    path = tmp_path / f"{kind}.parquet"
    if kind == "corrupt":
        path.write_bytes(b"PAR1 this is not a Parquet file")
    elif kind == "csv-named-parquet":
        path.write_text("user,item,rating\n1,10,4\n")
    else:
        table = {
            "empty": pa.table(good).slice(0, 0),
            "wrong-columns": pa.table({"uid": [1], "iid": [10], "stars": [4.0]}),
            "nan": pa.table({**good, "rating": [4.0, np.nan, 5.0, 1.0]}),
            "inf": pa.table({**good, "rating": [4.0, np.inf, 5.0, 1.0]}),
            "text-ratings": pa.table({**good, "rating": ["4", "good", "5", "1"]}),
            "one-row": pa.table({"user": [1], "item": [10], "rating": [4.0]}),
        }[kind]
        pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    "kind, says",
    [
        ("empty", "no rows"),
        ("wrong-columns", "dxplain datasets import FILE --out DIR --columns"),
        ("nan", "NaN or infinite"),
        ("inf", "NaN or infinite"),
        ("text-ratings", "ratings must be numbers"),
        ("one-row", "nothing to recommend"),
        ("corrupt", "cannot be read as a table"),
        ("csv-named-parquet", "cannot be read as a table"),
    ],
)
def test_bad_data_fails_before_any_flow_and_leaves_latest_alone(kind, says, tmp_path, no_flow, capsys):
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "LATEST").write_text("previous-run\n")
    before = sorted(p.name for p in out.rglob("*"))
    assert main(["refresh", "--dataset", str(_bad_data(tmp_path, kind)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dxplain: error:") and says in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.rglob("*")) == before and (out / "LATEST").read_text() == "previous-run\n"


def test_out_that_is_a_file_is_refused(tmp_path, no_flow, capsys):
    f = tmp_path / "results.txt"
    f.write_text("not a folder")
    assert main(["refresh", "--out", str(f)]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    assert f.read_text() == "not a folder"


def test_debug_shows_the_traceback(no_flow):
    from dxplain.errors import InputError

    with pytest.raises(InputError, match="--top-n 0"):
        main(["--debug", "refresh", "--top-n", "0"])


def _record(name, msg, exc=None):
    exc_info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, exc_info)


def test_prefect_tracebacks_of_a_dxplain_error_are_dropped_and_others_kept():
    """``main`` prints a dxplain error as one named line; Prefect's tracebacks and failed states of the same
    error would bury it. Any other exception keeps its traceback."""
    from dxplain.cli import _Chatter
    from dxplain.errors import InputError, NotConvergedError

    keep = _Chatter().filter
    bad = InputError("d/items.parquet: column 'z2' has 1 NaN")
    assert not keep(_record("prefect.task_runs", "Task run failed with exception: %r", bad))
    assert not keep(_record("prefect.flow_runs", "Encountered exception during execution: %r", NotConvergedError("no")))
    assert not keep(
        _record(
            "prefect.flow_runs",
            'Finished in state Failed("Flow run encountered an exception: InputError: d/items.parquet: column ...")',
        )
    )
    assert keep(_record("prefect.task_runs", "Task run failed with exception: %r", RuntimeError("a bug")))
    assert keep(_record("prefect.flow_runs", 'Finished in state Failed("... RuntimeError: a bug")'))


def test_volume_and_debug_options_work_after_the_command_too(capsys):
    from dxplain.errors import InputError

    assert main(["train", "--out", "m.zarr", "--k=0", "-q"]) == 2  # not "unrecognized arguments: -q"
    assert capsys.readouterr().err.strip() == "dxplain: error: -k 0: give an integer ≥ 1 (e.g. 32)"
    with pytest.raises(InputError, match="-k 0"):  # --debug after a nested command: the traceback
        main(["train", "--out", "m.zarr", "--k=0", "--debug"])
    for argv in (["train", "--out", "m.zarr", "-q", "-v"], ["-q", "train", "--out", "m.zarr", "-v"]):
        with pytest.raises(SystemExit):
            main(argv)  # still one or the other, on one level or two
        assert "not allowed with argument" in capsys.readouterr().err


def test_a_model_given_as_a_file_url_passes_the_checks(no_flow, tmp_path):
    (tmp_path / "m.zarr").mkdir()
    with pytest.raises(AssertionError, match="a flow started"):  # the checks passed: the flow was next
        main(["refresh", "--model", f"file://{tmp_path}/m.zarr", "--in-memory"])


def test_evaluate_on_a_scikit_learn_dataset_without_it_names_the_extra_before_any_flow(monkeypatch, tmp_path, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a))
    assert main(["evaluate", "--dataset", "breast-cancer", "--out", str(tmp_path / "ev")]) == 2
    assert "comes with scikit-learn: pip install -e '.[bench]'" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_a_store_that_stopped_answering_is_named_and_nothing_else_is():
    """``store_unreachable`` finds an S3 client's no-answer error however deep it is chained (a task's error
    raised from it, another raised while cleaning up after it), and ignores other connection errors."""
    botocore = pytest.importorskip("botocore.exceptions", reason="botocore comes with the s3 extra")
    from dxplain.errors import store_unreachable

    gone = botocore.EndpointConnectionError(endpoint_url="http://store:9000/bucket/key")
    try:
        try:
            raise RuntimeError("a task failed") from gone
        except RuntimeError:
            raise OSError("cleaning up failed too")  # noqa: B904 (raised while handling, as atomic_dir's rollback)
    except OSError as exc:
        said = store_unreachable(exc)
    assert said.startswith("the object store did not answer") and "http://store:9000/bucket/key" in said
    assert store_unreachable(ConnectionRefusedError("tcp://scheduler:8786")) is None  # a Dask scheduler, not a store
    assert store_unreachable(OSError("disk full")) is None
