"""Bad options and inputs fail before any flow starts: exit 2, one line naming the value and the fix."""

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


@pytest.mark.parametrize("argv, says", [
    (["refresh", "--top-n", "0"], "--top-n 0: give an integer ≥ 1"),
    (["refresh", "--top-k", "-1"], "--top-k -1: give an integer ≥ 0"),
    (["refresh", "--workers", "0"], "--workers 0: give an integer ≥ 1"),
    (["refresh", "--lam", "-1"], "--lam -1.0: give a number > 0"),
    (["refresh", "--dataset", "no/such/file.parquet"], "not a known dataset name"),
    (["negatives", "--percent", "0"], "--percent 0.0: give a number > 0 and ≤ 100"),
    (["negatives", "--method", "magic"], "--method 'magic': give one of representer, fia, loss, random"),
    (["prototypes", "--user", "1", "-m", "0"], "-m 0: give an integer ≥ 1"),
    (["refresh", "--scheduler", "tcp://127.0.0.1:9"], "cannot reach the Dask scheduler"),
])
def test_bad_option_is_one_line_and_exit_2(argv, says, no_flow, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and err.startswith("dxplain: error:") and len(err.splitlines()) == 1
    assert "Traceback" not in err


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
