"""``dxplain serve`` in a real browser: Selenium drives Debian's headless Chromium (``chromium``, ``chromium-driver``)
against a live server on an ml-100k run. It types a user into the search box, opens one of their recommendations
by clicking it, and reads the reasons the page drew: they are the run's rows for that target, with the dataset's
titles. It finds an item by a word of its title, picks a user the run explains it for, and lands on that
recommendation. The screenshot in docs/ is this browser's (``DXPLAIN_DOCS_SCREENSHOT=1`` writes it). Skips, saying
why, without a browser, its driver or Selenium."""

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from dxplain.datasets.registry import resolve_catalogue
from dxplain.io import runs
from dxplain.web.app import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    SELENIUM = True
except ImportError:
    SELENIUM = False
MISSING = (
    "no chromium on PATH (Debian: apt-get install chromium chromium-driver; .ci/run does)"
    if CHROMIUM is None
    else "no chromedriver on PATH (Debian: apt-get install chromium-driver; .ci/run does)"
    if CHROMEDRIVER is None
    else "selenium is not installed (pip install -e '.[test]')"
    if not SELENIUM
    else ""
)
pytestmark = [pytest.mark.skipif(bool(MISSING), reason=MISSING), pytest.mark.usefixtures("prefect_server")]
WAIT = 30


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


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait_for(browser, css: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def search_user(browser, server: str, user) -> None:
    from selenium.webdriver.common.by import By

    browser.get(server)
    wait_for(browser, "body[data-ready='1']")
    box = browser.find_element(By.ID, "user")
    box.clear()
    box.send_keys(str(user))
    browser.find_element(By.CSS_SELECTOR, "#search button[type=submit]").click()
    wait_for(browser, f"body[data-user='{user}'] details.target")


def shown_reasons(browser, item) -> list[tuple[str, str, str, float]]:
    """The open recommendation's reason rows as the page drew them: (side, first cell's text, train item,
    importance)."""
    from selenium.webdriver.common.by import By

    target = browser.find_element(By.CSS_SELECTOR, f"details.target[data-item='{item}']")
    assert target.get_attribute("open") is not None
    found = []
    for table in target.find_elements(By.CSS_SELECTOR, "table.reasons"):
        for tr in table.find_elements(By.CSS_SELECTOR, "tr[data-importance]"):
            first = tr.find_element(By.TAG_NAME, "td").text
            side = table.get_attribute("data-side")
            found.append((side, first, tr.get_attribute("data-train-item"), float(tr.get_attribute("data-importance"))))
    return found


def test_searching_a_user_and_opening_a_recommendation_shows_the_runs_rows(server, ml100k_run, browser):
    from selenium.webdriver.common.by import By

    rows = runs.open_run(runs.resolve_run(ml100k_run)).to_table()
    user, item = rows.column("user")[0].as_py(), rows.column("item")[0].as_py()
    search_user(browser, server, user)
    browser.find_element(By.CSS_SELECTOR, f"details.target[data-item='{item}'] summary").click()
    wait_for(browser, f"details.target[data-item='{item}'][open]")
    page = shown_reasons(browser, item)
    want = rows.filter(pc.and_(pc.equal(rows.column("user"), user), pc.equal(rows.column("item"), item)))
    assert len(page) == want.num_rows > 0
    got = sorted((s, imp) for s, _, _, imp in page)
    expected = sorted(zip(want.column("side").cast("string").to_pylist(), want.column("importance").to_pylist()))
    assert [s for s, _ in got] == [s for s, _ in expected]
    np.testing.assert_allclose([i for _, i in got], [i for _, i in expected], rtol=1e-12)
    # the user's own interactions are named by their titles, as the dataset has them
    _, items = resolve_catalogue("movielens-100k")
    titles = dict(zip(items["id"].to_pylist(), items["title"].to_pylist()))
    kinds = dict(zip(zip(want["side"].cast("string").to_pylist(), want["train_item"].to_pylist()), want["kind"]))
    named = [(t, ti) for s, t, ti, _ in page if s == "item" and str(kinds.get(("item", int(ti)))) == "interaction"]
    assert named and all(t.startswith(titles[int(ti)]) for t, ti in named)
    summary = browser.find_element(By.CSS_SELECTOR, f"details.target[data-item='{item}'] summary").text
    assert titles[item] in summary
    assert "No earlier run" in browser.find_element(By.ID, "changes").text  # the folder's only run


def test_an_item_found_by_its_title_leads_to_a_user_it_is_explained_for(server, ml100k_run, browser):
    from selenium.webdriver.common.by import By

    rows = runs.open_run(runs.resolve_run(ml100k_run)).to_table(columns=["user", "item", "rec_rank"])
    _, items = resolve_catalogue("movielens-100k")
    popular = pc.value_counts(rows["item"]).to_pylist()
    item = max(popular, key=lambda c: c["counts"])["values"]  # the run's most explained item
    title = items.filter(pc.equal(items["id"], item))["title"][0].as_py()
    browser.get(server)
    wait_for(browser, "body[data-ready='1']")
    browser.find_element(By.ID, "item").send_keys(title.split(",")[0])
    browser.find_element(By.CSS_SELECTOR, "#item-search button[type=submit]").click()
    wait_for(browser, f"button.item[data-item='{item}']").click()
    first = wait_for(browser, "button.user")
    user = int(first.get_attribute("data-user"))
    first.click()
    wait_for(browser, f"body[data-user='{user}'] details.target[data-item='{item}'][open]")
    mine = rows.filter(pc.equal(rows["user"], user))
    assert item in mine["item"].to_pylist()
    shown = {int(e.get_attribute("data-item")) for e in browser.find_elements(By.CSS_SELECTOR, "details.target")}
    assert shown == set(mine["item"].to_pylist())


@pytest.mark.slow  # docs/serve.png only
def test_a_screenshot_for_the_docs(server, ml100k_run, browser, tmp_path):
    from selenium.webdriver.common.by import By

    rows = runs.open_run(runs.resolve_run(ml100k_run)).to_table(columns=["user", "item"])
    user, item = rows.column("user")[0].as_py(), rows.column("item")[0].as_py()
    search_user(browser, server, user)
    browser.find_element(By.CSS_SELECTOR, f"details.target[data-item='{item}'] summary").click()
    wait_for(browser, f"details.target[data-item='{item}'][open]")
    shot = tmp_path / "serve.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("DXPLAIN_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(shot, Path(__file__).parents[1] / "docs" / "serve.png")
