"""``dxplain report``: the page's numbers equal the run's manifest and its Parquet rows; result folders; bad input."""

import base64
import json
import re
from html.parser import HTMLParser

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.reporting.aggregate import SCAN_COLUMNS, fidelity_decades, recommendations, scan_rows


class Page(HTMLParser):
    """Every start tag of a page with its attributes, and the text of each ``<pre>``."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.pre, self._in_pre = [], [], False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_pre = tag == "pre"

    def handle_data(self, data):
        if self._in_pre:
            self.pre.append(data)
            self._in_pre = False

    def having(self, attr: str) -> list[dict]:
        return [a for _, a in self.tags if attr in a]


@pytest.fixture(scope="module")
def out(prefect_server, tmp_path_factory):
    """An output folder with one refresh run of the default model: capped (2 sweeps, no Newton polish), so every
    target's fidelity error is far from rounding noise, and every attribution kept (top_k 0)."""
    from dxplain.flows.refresh import refresh

    folder = tmp_path_factory.mktemp("data") / "small"
    write_dataset(folder, interactions_table(random_interactions(30, 25, 0.3, seed=3)))
    out = tmp_path_factory.mktemp("out")
    refresh(
        dataset=str(folder),
        out=str(out),
        top_n=3,
        top_k=0,
        k=4,
        lam=5e-3,
        in_memory=True,
        max_sweeps=2,
        newton_steps=0,
        tol=1.0,
    )
    return out


def report(capsys, *argv) -> tuple[Page, str]:
    assert main(["report", *map(str, argv)]) == 0
    path = capsys.readouterr().out.strip().splitlines()[-1]
    with open(path, encoding="utf-8") as fh:
        return Page(fh.read()), path


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def test_the_summary_on_the_page_is_the_manifests(out, tmp_path, capsys):
    page, _ = report(capsys, out, "--out", tmp_path / "r.html")
    shown = {a["data-key"]: a["data-value"] for a in page.having("data-key")}
    want = flatten(runs.read_manifest(runs.resolve_run(out))["summary"])
    assert {"lam", "grad_norm", "stage_seconds.train", "peak_rss_mib.flow", "dataset"} <= set(want)
    assert shown == {k: repr(v) if isinstance(v, float) else str(v) for k, v in want.items()}


def test_the_fidelity_histogram_equals_the_errors_measured_from_the_parquet(out, tmp_path, capsys):
    page, _ = report(capsys, out, "--out", tmp_path / "r.html")
    (table,) = [a for t, a in page.tags if t == "table" and a.get("id") == "fidelity"]
    assert table["data-source"] == "recorded"  # by the refresh, over every training row
    html = open(tmp_path / "r.html", encoding="utf-8").read()
    shown = {(s, int(d)): int(n) for s, d, n in re.findall(r'data-side="(\w+)" data-decade="(-?\d+)">(\d+)<', html)}
    assert {key for key in shown} == {(a["data-side"], int(a["data-decade"])) for a in page.having("data-decade")}
    # Independently: Σ importance per target and side against the score (top_k 0 kept every row).
    rows = runs.open_run(runs.resolve_run(out)).to_table().to_pandas()
    sums = rows.groupby(["user", "item", "side"], observed=True).agg(
        total=("importance", "sum"), score=("score", "first")
    )
    floor = runs.read_manifest(runs.resolve_run(out))["summary"]["fidelity_score_floor"]  # a biased model's scale
    rel = (sums.total - sums.score).abs() / np.maximum(sums.score.abs(), floor)
    decade = np.clip(np.floor(np.log10(rel)), -16, 2).astype(int)
    want = decade.groupby(level="side", observed=True).value_counts().to_dict()
    assert max(rel) > 1e-3  # the capped model is far from its optimum: the decades are not rounding noise
    # Errors at rounding level (the side the last half-step solved exactly) fall in a decade that depends on the
    # order of summation: those are compared as one count per side.
    ROUNDING = -13
    for side in ("item", "user"):
        assert {d: n for (s, d), n in shown.items() if s == side and d >= ROUNDING} == {
            d: n for (s, d), n in want.items() if s == side and d >= ROUNDING
        }
        assert sum(n for (s, d), n in shown.items() if s == side and d < ROUNDING) == sum(
            n for (s, d), n in want.items() if s == side and d < ROUNDING
        )


def test_the_page_opens_with_the_headline_and_keeps_the_internals_collapsed_at_the_end(out, tmp_path, capsys):
    report(capsys, out, "--out", tmp_path / "h.html")
    html = open(tmp_path / "h.html", encoding="utf-8").read()
    headline, first_user = html.index("<dl class=headline>"), html.index("data-user=")
    internals, summary = html.index("<details id=internals>"), html.index('<table id="summary">')
    assert headline < first_user < internals < summary  # the summary table inside the collapsed internals


def test_the_user_table_lists_the_runs_users_and_their_recommendations(out, tmp_path, capsys):
    rows = runs.open_run(runs.resolve_run(out)).to_table()
    users = sorted(pc.unique(rows.column("user")).to_pylist())
    page, _ = report(capsys, out, "--out", tmp_path / "all.html", "--users", 1000)
    assert [a["data-user"] for a in page.having("data-user")] == [str(u) for u in users]
    # Each user's block lists its recommendations in rank order: the rows that follow its <details>.
    listed, current = {}, None
    for tag, a in page.tags:
        if tag == "details" and "data-user" in a:  # (the run's internals are a <details> too)
            current = a["data-user"]
        elif "data-item" in a:
            listed.setdefault(current, []).append(a["data-item"])
    targets = (
        rows.group_by(["user", "item"])
        .aggregate([("rec_rank", "min")])
        .sort_by([("user", "ascending"), ("rec_rank_min", "ascending")])
        .to_pylist()
    )
    want = {}
    for t in targets:
        want.setdefault(str(t["user"]), []).append(str(t["item"]))
    assert listed == want
    page, _ = report(capsys, out, "--out", tmp_path / "few.html", "--users", 5)
    (note,) = page.having("data-shown")
    assert (note["data-shown"], note["data-total"]) == ("5", str(len(users)))
    assert [a["data-user"] for a in page.having("data-user")] == [str(u) for u in users[:5]]


def test_the_scan_adds_up_targets_split_across_batches(out):
    run = runs.resolve_run(out)
    whole = scan_rows(runs.open_run(run).to_table(columns=SCAN_COLUMNS).to_batches())
    split = scan_rows(runs.open_run(run).to_batches(columns=SCAN_COLUMNS, batch_size=7))
    assert whole.per_target.num_rows == split.per_target.num_rows == 2 * runs.read_manifest(run)["summary"]["targets"]
    assert whole.per_target.column("rows").to_pylist() == split.per_target.column("rows").to_pylist()
    np.testing.assert_allclose(whole.per_target.column("total").to_numpy(), split.per_target.column("total").to_numpy())
    for key, counts in whole.shares.items():
        np.testing.assert_array_equal(counts, split.shares[key])
    assert sum(c.sum() for c in whole.shares.values()) <= runs.read_manifest(run)["summary"]["attributions"]


def test_a_run_without_recorded_errors_says_what_its_histogram_measures(out):
    run = runs.resolve_run(out)
    shards = [
        {k: v for k, v in e.items() if not k.startswith("rel_error_decades")} for e in runs.read_manifest(run)["shards"]
    ]
    rows = scan_rows(runs.open_run(run).to_batches(columns=SCAN_COLUMNS))
    recorded, source = fidelity_decades(runs.read_manifest(run)["shards"], rows, 0)
    measured, source_all = fidelity_decades(shards, rows, 0)
    assert (source, source_all) == ("recorded", "rows (all attributions)")
    assert sum(measured["item"].values()) == sum(recorded["item"].values())
    assert fidelity_decades(shards, rows, 10)[1] == "rows (top-k only)"


def test_each_recommendation_keeps_its_most_important_reasons():
    rows = pa.table(
        {
            "user": [1] * 5 + [2],
            "item": [7] * 5 + [8],
            "prediction": [4.0] * 6,
            "score": [0.5] * 6,
            "rec_rank": [1] * 6,
            "side": ["item", "item", "item", "user", "user", "item"],
            "train_user": [1, 1, 1, 3, 4, 2],
            "train_item": [5, 6, 9, 7, 7, 5],
            "rating": [1.0] * 6,
            "importance": [0.1, 0.3, -0.2, 0.05, 0.4, 0.2],
        }
    )
    recs = recommendations(rows, reasons=2)
    assert list(recs) == [1, 2]
    (r,) = recs[1]
    assert [x.importance for x in r.reasons["item"]] == [0.3, 0.1] and [x.importance for x in r.reasons["user"]] == [
        0.4,
        0.05,
    ]


def test_the_report_starts_no_prefect_server_and_no_flow(out, tmp_path, capsys, monkeypatch):
    import prefect.flow_engine
    from prefect.server.api.server import SubprocessASGIServer

    def refuse(*args, **kwargs):
        raise AssertionError("dxplain report started Prefect")

    monkeypatch.setattr(SubprocessASGIServer, "start", refuse)
    monkeypatch.setattr(prefect.flow_engine, "run_flow", refuse)
    report(capsys, runs.resolve_run(out), "--out", tmp_path / "r.html")


@pytest.mark.parametrize("writer", ["write_results", "write_folder"])
def test_a_result_folder_gets_its_summary_pngs_and_tables(writer, tmp_path, capsys):
    """A folder of ``io.results.write_results`` (summary.json: evaluate, negatives, prototypes) or of
    ``write_folder`` with metrics.json and plots/ (the GAMMLI fit)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dxplain.io import results

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    flagged = pa.table({"user": np.arange(30), "item": np.arange(30) * 2, "score": np.linspace(-1, 0, 30)})
    summary = {"method": "representer", "percent": 1.5, "seconds": {"fit": 0.25}}
    if writer == "write_results":
        folder = results.write_results(
            tmp_path / "o",
            "negatives",
            {"flagged": flagged},
            summary,
            files={"curves.png": buf.getvalue(), "auc_del.md": "| method | AUC |\n"},
        )
        summary = json.loads((folder / "summary.json").read_text())  # with the folder it records
    else:
        folder = results.write_folder(
            tmp_path / "fit",
            {"flagged": flagged},
            {
                "plots/curves.png": buf.getvalue(),
                "auc_del.md": "| method | AUC |\n",
                "metrics.json": json.dumps(summary),
            },
        )
    page, _ = report(capsys, folder, "--out", tmp_path / "r.html")
    assert {a["data-key"]: a["data-value"] for a in page.having("data-key")} == {
        k: repr(v) if isinstance(v, float) else str(v) for k, v in flatten(summary).items()
    }
    (img,) = [a for t, a in page.tags if t == "img"]
    assert base64.b64decode(img["src"].removeprefix("data:image/png;base64,")) == buf.getvalue()
    assert "| method | AUC |\n" in page.pre
    html = open(tmp_path / "r.html", encoding="utf-8").read()
    assert "first 20 of 30 rows" in html


@pytest.mark.parametrize("case", ["not a run", "out exists", "users 0"])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    page, results = tmp_path / "page.html", tmp_path / "results"
    page.write_text("keep me")
    results.mkdir()
    (results / "summary.json").write_text("{}")  # a result folder: reported unless --out is refused
    argv = {
        "not a run": [tmp_path, "--out", tmp_path / "new.html"],
        "out exists": [results, "--out", page],
        "users 0": [results, "--users", 0, "--out", tmp_path / "new.html"],
    }[case]
    says = {
        "not a run": "neither a run folder",
        "out exists": "the file exists; give another name, or --force",
        "users 0": "--users 0: give an integer ≥ 1",
    }[case]
    assert main(["report", *map(str, argv)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert page.read_text() == "keep me" and not (tmp_path / "new.html").exists()


def test_decades_hold_their_errors_and_the_ends_hold_the_rest():
    from dxplain.explain.run_rows import ERROR_DECADES, decade_counts

    rel = np.array([0.0, 1e-20, 3e-9, 1e-9, 0.5, 1.0, 99.0, 1e5])
    assert decade_counts(rel) == {str(ERROR_DECADES[0]): 2, "-9": 2, "-1": 1, "0": 1, "1": 1, str(ERROR_DECADES[-1]): 1}
