"""Deployment settings: where to run and where to write, with ``DXPLAIN_*`` overrides.

Algorithm hyperparameters are *not* here: they are arguments of the models and explainers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path


def _env_int(name: str, raw: str) -> int:
    """``DXPLAIN_<NAME>``'s integer, checked as the matching CLI option would be."""
    from .errors import InputError
    from .params import CLUSTER, Interval

    rule = {
        "workers": CLUSTER["workers"],
        "threads_per_worker": Interval(int, 1, example=1),
        "blas_threads": Interval(int, 0, example=1),
    }.get(name, Interval(int))
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not rule.check(value):
        raise InputError(f"DXPLAIN_{name.upper()}={raw!r}: give {rule.describe()}, or unset it for the default")
    return value


def _default_data_home() -> str:
    return os.environ.get("DXPLAIN_HOME", str(Path.home() / ".cache" / "dxplain"))


@dataclass(frozen=True)
class Settings:
    """Where dxplain runs and writes.

    Every field can be overridden by an environment variable ``DXPLAIN_<FIELD>`` (upper case),
    and explicit CLI options override both.
    """

    scheduler: str | None = None  # tcp://host:port of an existing cluster; None = LocalCluster
    workers: int = 2  # LocalCluster worker processes
    threads_per_worker: int = 1  # Dask threads per worker
    blas_threads: int = 0  # BLAS threads per worker; 0 = cores // workers (never oversubscribe)
    out: str = "dxplain-out"  # root folder of runs
    data_home: str = field(default_factory=_default_data_home)  # prepared datasets and models
    data: str | None = None  # extra folder holding raw datasets (e.g. ml-100k/)
    tls_ca_file: str | None = None  # TLS for the Dask connection: CA certificate (PEM)
    tls_cert: str | None = None  # this client's certificate (PEM)
    tls_key: str | None = None  # this client's private key (PEM)

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        values = {}
        for f in fields(cls):
            raw = os.environ.get(f"DXPLAIN_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _env_int(f.name, raw) if f.type == "int" else raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def tls_files(self) -> tuple[str, str, str] | None:
        """(CA file, certificate, key) when TLS is configured, else None; a partial set is refused."""
        if not (self.tls_ca_file or self.tls_cert or self.tls_key):
            return None
        missing = [n for n in ("tls_ca_file", "tls_cert", "tls_key") if not getattr(self, n)]
        if missing:
            from .errors import InputError

            raise InputError(
                f"TLS needs a CA file, a certificate and a key; missing {missing} "
                "(set DXPLAIN_TLS_CA_FILE, DXPLAIN_TLS_CERT and DXPLAIN_TLS_KEY)"
            )
        return self.tls_ca_file, self.tls_cert, self.tls_key

    def blas_threads_per_worker(self) -> int:
        if self.blas_threads > 0:
            return self.blas_threads
        return max(1, (os.cpu_count() or 1) // max(1, self.workers))
