"""``dxplain serve`` in a real browser: headless Chromium (Debian's ``chromium``) opens the page on an ml-100k run with
a user and one of their recommendations in the URL (the page's search and open), and the reasons it renders are the
run's rows for that target. Also takes the screenshot in docs/. Skips, saying why, without a browser."""

import re
import shutil
import subprocess
import threading
import time
from html.parser import HTMLParser

import numpy as np
import pyarrow.compute as pc
import pytest

from dxplain.io import runs
from dxplain.web.app import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium; .ci/run does)"),
    pytest.mark.usefixtures("prefect_server"),
]


@pytest.fixture(scope="module")
def ml100k_run(ml100k, tmp_path_factory):
    from dxplain.flows.refresh import refresh

    out = tmp_path_factory.mktemp("out")
    refresh(dataset="movielens-100k", out=str(out), top_n=5, top_k=5, in_memory=True)
    return out


@pytest.fixture(scope="module")
def server(ml100k_run):
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(str(ml100k_run)), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


def chromium(*args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


class Rendered(HTMLParser):
    """The open recommendation's reason rows as the page drew them: (side, train user, train item, importance)."""

    def __init__(self, item: str):
        super().__init__()
        self.item, self.inside, self.side, self.rows, self.ready = item, False, None, [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
        if tag == "details" and "data-item" in a:
            self.inside = a["data-item"] == self.item and "open" in a
        if self.inside and tag == "table":
            self.side = a.get("data-side")
        if self.inside and tag == "tr" and "data-importance" in a:
            self.rows.append((self.side, a["data-train-user"], a["data-train-item"], float(a["data-importance"])))


def test_the_page_shows_a_targets_reasons_as_the_run_wrote_them(server, ml100k_run):
    rows = runs.open_run(runs.resolve_run(ml100k_run)).to_table()
    user, item = rows.column("user")[0].as_py(), rows.column("item")[0].as_py()
    page = Rendered(str(item))
    page.feed(chromium("--dump-dom", f"{server}/?user={user}&item={item}"))
    assert page.ready, "the page did not finish loading the user"
    want = rows.filter(pc.and_(pc.equal(rows.column("user"), user), pc.equal(rows.column("item"), item)))
    assert len(page.rows) == want.num_rows > 0
    got = sorted((s, imp) for s, _, _, imp in page.rows)
    expected = sorted(zip(want.column("side").cast("string").to_pylist(), want.column("importance").to_pylist()))
    assert [s for s, _ in got] == [s for s, _ in expected]
    np.testing.assert_allclose([i for _, i in got], [i for _, i in expected], rtol=1e-12)
    shown_items = {ti for s, _, ti, _ in page.rows if s == "item" and re.fullmatch(r"\w+", ti)}
    assert shown_items <= set(map(str, want.column("train_item").to_pylist()))


def test_a_screenshot_for_the_docs(server, ml100k_run, tmp_path):
    rows = runs.open_run(runs.resolve_run(ml100k_run)).to_table()
    user, item = rows.column("user")[0].as_py(), rows.column("item")[0].as_py()
    shot = tmp_path / "serve.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,900", f"{server}/?user={user}&item={item}")
    assert shot.stat().st_size > 10_000  # docs/serve.png is this file, copied by hand
