"""Is the slow convergence at k = 64 the price of a λ that overfits (#22 item 1)? Validation error and training
to the identity, per ridge, on the 1M scaling set.

    python -m benchmarks.investigations.als_ridge --ridges 7.5,15,30,60

One process, 2 threads. A seeded 90/10 split of ``benchmarks/scaling/refresh.py``'s set; for each ridge λ|D|/2 (the
default is 15, ``models.als.trainer.DEFAULT_RIDGE``) ``ALSMF(k, identity_tol=1e-5, newton_steps=0)`` trains on the 90%
for at most ``--max-sweeps`` sweeps; printed: the validation RMSE, the sweeps and seconds it took, the
identity bound it reached and how many of the k factors are above 10⁻³ of the largest. A study, not a
product path: findings are in docs/scaling.md ("What makes it slow").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import CACHE, parser
from benchmarks.scaling.common import scaling_dataset
from dxplain.datasets import resolve_dataset
from dxplain.errors import DegenerateError
from dxplain.kernels.als import pair_scores
from dxplain.models.als.trainer import ALSMF


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--size", type=int, default=1_000_000, help="interactions of the scaling set")
    ap.add_argument("--ridges", default="7.5,15,30,60", help="ridges λ|D|/2 to fit, comma-separated")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--max-sweeps", type=int, default=150)
    ap.add_argument("--cache", type=Path, default=CACHE)
    a = ap.parse_args(argv)

    data = resolve_dataset(str(scaling_dataset(a.cache, a.size))).interactions
    held_out = np.random.default_rng(0).random(len(data)) < 0.1
    train, val = data.subset(~held_out), data.subset(held_out)
    mu = train.rating_mean()
    print(
        f"{len(train):,} ratings to train on, {len(val):,} held out; the mean's RMSE "
        f"{np.sqrt(np.mean((val.rating - mu) ** 2)):.4f}",
        flush=True,
    )
    with threadpool_limits(2):
        for ridge in (float(r) for r in a.ridges.split(",")):
            lam = 2 * ridge / len(train)
            t0 = time.perf_counter()
            try:
                m = ALSMF(k=a.k, lam=lam, identity_tol=1e-5, max_sweeps=a.max_sweeps, newton_steps=0).fit(train)
            except DegenerateError as exc:
                print(f"ridge {ridge:g}: {exc}", flush=True)
                continue
            rmse = np.sqrt(np.mean((val.rating - mu - pair_scores(m.U, m.V, val.user, val.item)) ** 2))
            s = np.linalg.svd(np.linalg.qr(m.U, mode="r") @ np.linalg.qr(m.V, mode="r").T, compute_uv=False)  # UVᵀ's
            bound = m.info["identity_bound"]
            print(
                f"ridge {ridge:g} (λ {lam:.2e}): validation RMSE {rmse:.4f}; {m.info['sweeps']} sweeps, "
                f"{time.perf_counter() - t0:.1f} s, identity bound item {bound['item']:.1e} · "
                f"user {bound['user']:.1e}, {int(np.sum(s > 1e-3 * s[0]))} factors above 1e-3 of the largest",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
