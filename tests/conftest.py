import atexit
import os
import shutil
import tempfile

# Keep Prefect's ephemeral database out of the user's home during tests (set before prefect loads),
# and remove it when the session ends: repeated test runs must not pile up folders in the temp dir.
if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="dxplain-prefect-")
    atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "dxplain")
# A loaded CI machine took over 30 s to start Prefect's temporary server (tests and subprocesses alike).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
# Unit tests call dxplain functions that log outside any flow run: expected, not an API problem.
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")

import numpy as np
import pyarrow as pa
import pytest

from dxplain.config import Settings
from dxplain.interactions import Interactions


def random_interactions(n_users=40, n_items=30, density=0.3, seed=0, string_ids=True) -> Interactions:
    """Random explicit ratings with every user and item present; string ids exercise the id mapping."""
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < density
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    mask[rng.integers(0, n_users, n_items), np.arange(n_items)] = True
    u, i = np.nonzero(mask)
    y = rng.integers(1, 6, len(u)).astype(float)
    uids = pa.array([f"u{x:03d}" for x in range(n_users)]) if string_ids else pa.array(np.arange(n_users) * 7)
    iids = pa.array([f"i{x:03d}" for x in range(n_items)]) if string_ids else pa.array(np.arange(n_items) * 3)
    return Interactions.from_indices(u, i, y, uids, iids)


def interactions_table(data: Interactions) -> pa.Table:
    return pa.table(
        {
            "user": data.user_ids.take(pa.array(data.user)),
            "item": data.item_ids.take(pa.array(data.item)),
            "rating": data.rating,
        }
    )


def write_random_dataset(tmp_path_factory, seed: int):
    """A prepared dataset folder of random_interactions(40, 30, 0.3, seed), and the interactions."""
    from dxplain.io.dataset_folders import write_dataset

    folder = tmp_path_factory.mktemp("data") / "small"
    d = random_interactions(40, 30, 0.3, seed=seed)
    write_dataset(folder, interactions_table(d))
    return folder, d


def only_run(out, kind: str):
    """The single result folder under <out>/<kind>/ (hidden folders such as .cache aside)."""
    (folder,) = [p for p in (out / kind).iterdir() if not p.name.startswith(".")]
    return folder


@pytest.fixture
def small():
    return random_interactions()


@pytest.fixture(scope="session")
def ml100k(tmp_path_factory):
    """MovieLens-100k via DXPLAIN_DATA or ../shared/data, else fetched; skipped (saying why) if neither works."""
    from dxplain.datasets import resolve_dataset

    settings = Settings.from_env(data_home=str(tmp_path_factory.mktemp("dxplain-home")))
    try:
        return resolve_dataset("movielens-100k", settings)
    except Exception as exc:  # noqa: BLE001 - any failure to find or fetch means skip, with the reason
        pytest.skip(f"MovieLens-100k unavailable: not in DXPLAIN_DATA or ../shared/data, and fetching failed: {exc}")


@pytest.fixture(scope="session")
def prefect_server():
    """One temporary Prefect server for the session's flow tests (each start costs 15-20 s on 2 cores),
    stopped inside pytest (not at interpreter exit)."""
    from prefect.logging.configuration import setup_logging
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=None):  # the variable above, not the harness's 30 s
        # Prefect's console handler keeps the sys.stderr of whenever logging is set up: here, pytest's
        # session-long capture. Set up inside a test using capsys, it would hold that test's stream, which
        # is closed for every later test (their flows then fail writing a log line).
        setup_logging()
        yield


@pytest.fixture(scope="module")
def s3():
    """An S3 API (moto's server) on loopback, bucket ``dxplain``; s3fs talks HTTP to it (``remote.s3_endpoint``)."""
    pytest.importorskip("s3fs", reason="s3fs is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra: pip install -e '.[test]'")
    from remote import s3_endpoint

    with s3_endpoint() as fs:
        yield fs
