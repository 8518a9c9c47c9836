"""Why ALS-MF converges slowly on the scaling sets (#22 item 1): sweeps to a stationary model, per solver variant.

    python -m benchmarks.investigations.als_solvers --variant anderson --sweeps 80        # today's trainer's sweeps
    python -m benchmarks.investigations.als_solvers --variant plain --sweeps 60
    python -m benchmarks.investigations.als_solvers --variant balanced --sweeps 60
    python -m benchmarks.investigations.als_solvers --variant anderson --memory 30 --sweeps 80
    python -m benchmarks.investigations.als_solvers --variant anderson --no-guard --float64 --sweeps 60
    python -m benchmarks.investigations.als_solvers --variant newton-mr --sweeps 20 --newton 6
    python -m benchmarks.investigations.als_solvers --variant anderson --k 8 --sweeps 30 --every 5   # the control
    python -m benchmarks.investigations.als_solvers --variant anderson --sweeps 60 --spectrum  # UVᵀ's and E's spectra
    python -m benchmarks.investigations.als_solvers --variant reduced-newton --sweeps 20 --newton 12 --products 60
    python -m benchmarks.investigations.als_solvers --variant anderson --sweeps 60 --every 60 --reduced-spectrum 40
    python -m benchmarks.investigations.als_solvers --variant anderson --sweeps 80 --init svd       # a spectral start
    python -m benchmarks.investigations.als_solvers --variant anderson --rank 64 --sweeps 60 --every 5  # rank 64

One process, 2 BLAS threads, the 1M scaling set (``benchmarks/scaling/refresh.py``'s: 10,000 users × 2,500 items,
Zipf degrees, ratings of rank 8 plus noise; ``--rank`` another rank), its popularity-drawn supplied targets
(10 a user) and the default λ. Every ``--every`` sweeps it prints f, ‖∇f‖ and each side's relative fidelity
error (median / p99 over the targets, measured as a refresh does: balanced factors, Σ attributions against
the score).

Variants (each an exact ALS sweep — users given V, then items given U — unless said):

- ``plain``: sweeps alone;
- ``balanced``: between sweeps (U, V) is replaced by its balanced pair, UᵀU = VᵀV at the same UVᵀ (the
  explanation's own transforms), which lowers the regulariser;
- ``anderson``: the trainer's Anderson acceleration on V (``--memory`` sweeps, float32 history), a
  combination that raises f refused and the history reset (``--no-guard`` keeps every combination);
- ``newton-mr``: ``--sweeps`` Anderson sweeps, then ``--newton`` Newton-MR steps towards ∇f = 0: MINRES on
  H p = −∇f (the exact Hessian, indefinite; the per-row k×k blocks as preconditioner; ``--products`` at
  most), the step halved until ‖∇f‖ falls. Any stationary point satisfies the representer identity, so
  this aims at the nearest one rather than at a minimum;
- ``reduced-newton``: ``--sweeps`` Anderson sweeps, then ``--newton`` trust-region Newton steps on the
  reduced objective φ(V) = min_U f(U, V) (``reduced_newton``: variable projection with its exact Hessian).

``--reduced-spectrum N`` prints, after the sweeps, the N smallest eigenvalues of φ's Hessian relative to the
items' blocks, off the rotations (``reduced_spectrum``): the curvature that sets ALS's pace.

A study, not a product path: findings are in docs/scaling.md ("Solvers tried against it").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.sparse.linalg import LinearOperator, minres
from threadpoolctl import threadpool_limits

from benchmarks.common import CACHE, parser
from benchmarks.scaling.common import scaling_dataset, supplied_targets
from dxplain.datasets import resolve_dataset
from dxplain.explain.representer import Preprocessed
from dxplain.explain.run_rows import relative_error
from dxplain.io.validation import index_of
from dxplain.kernels import anderson
from dxplain.kernels.als import pair_scores
from dxplain.kernels.balance import balance_transforms
from dxplain.models.als.half_steps import LocalHalfSteps
from dxplain.models.als.trainer import UPHILL_SLACK, default_lam
from dxplain.models.base import FactorModel


def fidelity(U, V, data, mu, lam, u, i) -> str:
    """Each side's relative identity error, median / p99 over the targets (item side: u's history)."""
    pre = Preprocessed.from_model(FactorModel(U, V, mu, lam, len(data)), data)
    s = pair_scores(pre.Ut, pre.Vt, u, i)
    out = []
    for side, x in (("item", pair_scores(pre.A, pre.Vt, u, i)), ("user", pair_scores(pre.Ut, pre.B, u, i))):
        r = relative_error(x, s)
        out.append(f"{side} {np.median(r):.1e} / {np.quantile(r, 0.99):.1e}")
    return ", ".join(out)


def spectrum(hs, U, V) -> str:
    """UVᵀ's singular values (top 8, then the rest's range) and the residual's top singular value σ₁(E), E
    the sparse matrix of residuals on D, both in units of the ridge λ|D|/2: a factor with σ₁(E) < 1 there
    cannot grow from zero, and σ₁(E) ≤ 1 certifies a rank-deficient stationary point as the global
    optimum (the nuclear-norm problem's optimality condition)."""
    from scipy.sparse.linalg import svds

    T_U, T_V = balance_transforms(U, V)
    s = np.sort(np.sum((U @ T_U) ** 2, axis=0))[::-1] / hs.ridge  # ŨᵀŨ = Σ₃ on the diagonal
    E = hs.P.matrix(hs.y - pair_scores(U, V, hs.P.u, hs.P.i))
    e1 = svds(E, k=1, return_singular_vectors=False)[0] / hs.ridge
    rest = s[8:] if len(s) > 8 else np.zeros(1)
    return (
        f"σ(UVᵀ)/ridge top {np.array2string(s[:8], precision=3)}, rest {rest.min():.2e}..{rest.max():.2e} "
        f"({int(np.sum(s < 1e-3 * s[0]))} below 1e-3 of the top), σ₁(E)/ridge {e1:.6f}"
    )


def spectral_start(hs, k):
    """V₀ from the top-k SVD of the centred ratings on D (zeros elsewhere), Q·√(σ − ridge)₊: the factors
    that would be optimal if every rating were observed, a start that skips the random start's saddles."""
    from scipy.sparse.linalg import svds

    _, s, Qt = svds(hs.P.matrix(hs.y), k=k)
    return Qt.T * np.sqrt(np.maximum(s - hs.ridge, 1e-3 * s.max()))


def balanced(U, V):
    """(U T_U, V T_V) with the same UVᵀ and UᵀU = VᵀV (``kernels.representer.balance_transforms``; it also
    rotates, which an ALS sweep carries through unchanged: users(V Q) = users(V) Q for orthogonal Q)."""
    T_U, T_V = balance_transforms(U, V)
    return U @ T_U, V @ T_V


def blocks(Mx, X):
    """Each row of X times its own k×k block: (Mx[r] @ X[r])_r."""
    return np.einsum("nkl,nl->nk", Mx, X)


def newton_mr(hs, U, V, lam, steps, products, report):
    """Newton-MR towards ∇f = 0 from (U, V): MINRES on the exact (indefinite) Hessian."""
    nU, k = U.size, U.shape[1]

    def split(x):
        return x[:nU].reshape(U.shape), x[nU:].reshape(V.shape)

    def grad(x):
        _, gU, gV = hs.gradient(*split(x), lam)
        return np.concatenate([gU.ravel(), gV.ravel()])

    x, used = np.concatenate([U.ravel(), V.ravel()]), 0
    g = grad(x)
    for step in range(1, steps + 1):
        A, B = hs.curvature_grams(*split(x))
        inv = np.linalg.inv(np.concatenate([A, B]) + lam * np.eye(k))
        M = LinearOperator((x.size,) * 2, matvec=lambda r: blocks(inv, r.reshape(len(inv), k)).ravel())
        calls = [0]

        def hv(v):
            calls[0] += 1
            hU, hV = hs.hessian_vector(*split(x), *split(v), lam)
            return np.concatenate([hU.ravel(), hV.ravel()])

        # rtol 1e-8: MINRES's least-squares test stops a singular system (the rotations) at once otherwise.
        p, _ = minres(LinearOperator((x.size,) * 2, matvec=hv), -g, M=M, rtol=1e-8, maxiter=products)
        used += calls[0]
        t, gnorm = 1.0, np.linalg.norm(g)
        while True:
            g_new = grad(x + t * p)
            if np.linalg.norm(g_new) < (1 - 1e-4 * t) * gnorm or t < 1e-4:
                break
            t /= 2
        x, g = x + t * p, g_new
        report(f"Newton-MR {step} ({used} Hessian products, step {t:g})", *split(x), float(np.linalg.norm(g)))


def reduced_hessian(hs, U, V, lam):
    """φ's Hessian at V, U its users' half-step (φ and the Schur complement: ``reduced_newton``), as a
    product dV ↦ ∇²φ dV, and the items' blocks M (B + λI, what an items' half-step inverts)."""
    A, B = hs.curvature_grams(U, V)
    eye = lam * np.eye(V.shape[1])
    A_inv, zero = np.linalg.inv(A + eye), np.zeros_like(U)

    def product(dV):
        a, _ = hs.hessian_vector(U, V, zero, dV, lam)
        _, b = hs.hessian_vector(U, V, -blocks(A_inv, a), dV, lam)
        return b

    return product, B + eye


def reduced_newton(hs, V, lam, n, steps, products, report):
    """Newton on the reduced objective φ(V) = min_U f(U, V) (variable projection, second order).

    U is the users' exact half-step at every point, so ∇φ = ∇_V f there, and ∇²φ is the Schur complement
    H_VV − H_VU H_UU⁻¹ H_UV (H_UU is block-diagonal: the users' k×k blocks, exact, no residual term). Its
    products cost two Hessian products and a per-user block solve, not a sweep. Steihaug's truncated PCG in
    a trust region, preconditioned and measured by the items' blocks (what an items' half-step inverts),
    copes with the curvature's sign; the trust region's ratio judges a step by φ at the new V, with U its
    exact half-step again."""

    def phi_at(V):
        U = hs.users(V)
        rss, _, g = hs.gradient(U, V, lam)
        return U, g, rss / n + 0.5 * lam * (np.vdot(U, U) + np.vdot(V, V))

    U, g, phi = phi_at(V)
    radius, used, g0 = None, 0, float(np.linalg.norm(g))
    for step in range(1, steps + 1):
        schur, M = reduced_hessian(hs, U, V, lam)
        M_inv = np.linalg.inv(M)

        def m_norm2(X):
            return float(np.vdot(X, blocks(M, X)))

        gnorm = float(np.linalg.norm(g))
        if radius is None:
            radius = 10.0 * np.sqrt(m_norm2(blocks(M_inv, g)))
        tol = gnorm * min(0.5, np.sqrt(gnorm / g0))  # CG's forcing term: tighter as ‖∇φ‖ falls
        # Steihaug–Toint truncated PCG on S z = −g inside ‖z‖_M ≤ radius.
        z, Sz, r = np.zeros_like(V), np.zeros_like(V), g.copy()
        y = blocks(M_inv, r)
        d, ry, how = -y, float(np.vdot(r, y)), "cg"
        for it in range(products):
            Sd = schur(d)
            used += 2
            curv = float(np.vdot(d, Sd))
            alpha = ry / curv if curv > 0 else np.inf
            zn = z + alpha * d if curv > 0 else None
            if curv <= 0 or m_norm2(zn) >= radius**2:
                # to the boundary along d: ‖z + τd‖_M = radius
                zz, zd, dd = m_norm2(z), float(np.vdot(z, blocks(M, d))), m_norm2(d)
                tau = (-zd + np.sqrt(zd * zd + dd * (radius**2 - zz))) / dd
                z, Sz = z + tau * d, Sz + tau * Sd
                how = "negative curvature" if curv <= 0 else "boundary"
                break
            z, Sz, r = zn, Sz + alpha * Sd, r + alpha * Sd
            if np.linalg.norm(r) <= tol:
                break
            y = blocks(M_inv, r)
            ry_new = float(np.vdot(r, y))
            d, ry = -y + (ry_new / ry) * d, ry_new
        pred = -(float(np.vdot(g, z)) + 0.5 * float(np.vdot(z, Sz)))
        U_new, g_new, phi_new = phi_at(V + z)
        rho = (phi - phi_new) / pred if pred > 0 else -1.0
        zn2 = np.sqrt(m_norm2(z))
        if rho < 0.25:
            radius = 0.25 * zn2
        elif rho > 0.75 and how != "cg":
            radius = 2.0 * radius
        if rho > 0.1:
            V, U, g, phi = V + z, U_new, g_new, phi_new
        report(
            f"reduced Newton {step} ({it + 1} CG its, {how}, ρ {rho:.3f}, {used} Hessian products, "
            f"{'taken' if rho > 0.1 else 'refused'})",
            U,
            V,
            float(np.linalg.norm(g)),
        )


def reduced_spectrum(hs, V, lam, count) -> str:
    """The ``count`` smallest eigenvalues of the reduced Hessian ∇²φ (``reduced_newton``) at V, relative to
    the items' blocks M (of M^-½ ∇²φ M^-½, whose spectrum lies in [0, 1] at a minimum: an items' half-step
    moves along an eigenvector by about its eigenvalue's share a sweep, so eigenvalues near 0 are what ALS
    crawls along), with the rotations V → VQ (on which φ is flat whatever V) moved out of the way.

    Lanczos (scipy's eigsh) on 1.05·I − M^-½ ∇²φ M^-½ − 2.1·P, P the projector on the rotations' tangents
    M^½ V Ω (Ω skew; an orthonormal basis of k(k−1)/2 columns, dense: 2.6 GB at 1M, a study's price)."""
    from scipy.sparse.linalg import eigsh

    k, N = V.shape[1], V.size
    hessian, M = reduced_hessian(hs, hs.users(V), V, lam)
    L = np.linalg.cholesky(M)  # M = L Lᵀ per item
    L_inv = np.linalg.inv(L)

    def scaled(x):  # L⁻¹ ∇²φ L⁻ᵀ x
        return blocks(L_inv, hessian(blocks(np.swapaxes(L_inv, 1, 2), x.reshape(V.shape)))).ravel()

    upper = np.triu_indices(k, 1)
    tangents = np.empty((N, len(upper[0])))
    for c, (a, b) in enumerate(zip(*upper)):
        Om = np.zeros((k, k))
        Om[a, b], Om[b, a] = 1.0, -1.0
        tangents[:, c] = blocks(np.swapaxes(L, 1, 2), V @ Om).ravel()
    Q = np.linalg.qr(tangents)[0]
    del tangents
    shift = 1.05  # above the top eigenvalue (1 for the items' half-step's own blocks)
    op = LinearOperator((N, N), matvec=lambda x: shift * x - scaled(x) - 2 * shift * (Q @ (Q.T @ x)))
    top = eigsh(op, k=count, which="LA", tol=1e-3, return_eigenvectors=False)
    vals = np.sort(shift - top)
    return (
        f"reduced Hessian's {count} smallest eigenvalues off the rotations (relative to the items' blocks): "
        f"{np.array2string(vals, precision=4, max_line_width=100)}; {int(np.sum(vals < 0))} negative"
    )


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--size", type=int, default=1_000_000, help="interactions of the scaling set")
    ap.add_argument(
        "--variant", default="anderson", choices=["plain", "balanced", "anderson", "newton-mr", "reduced-newton"]
    )
    ap.add_argument("--sweeps", type=int, default=80)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--rank", type=int, default=8, help="the synthetic ratings' rank (8: the recorded sets)")
    ap.add_argument("--memory", type=int, default=10, help="Anderson's sweeps")
    ap.add_argument("--no-guard", action="store_true", help="keep Anderson combinations that raise f")
    ap.add_argument("--float64", action="store_true", help="Anderson's history in float64")
    ap.add_argument("--newton", type=int, default=6, help="Newton-MR steps after the sweeps")
    ap.add_argument("--products", type=int, default=40, help="Hessian products per Newton-MR step at most")
    ap.add_argument(
        "--finish-users",
        action="store_true",
        help="after the sweeps, one more users' half-step, so that U is the exact one given V",
    )
    ap.add_argument("--spectrum", action="store_true", help="print UVᵀ's and the residual's singular values")
    ap.add_argument(
        "--reduced-spectrum",
        type=int,
        default=0,
        metavar="N",
        help="after the sweeps, the reduced Hessian's N smallest eigenvalues (reduced_spectrum)",
    )
    ap.add_argument(
        "--init",
        default="random",
        choices=["random", "svd"],
        help="the trainer's seeded random start, or the top-k SVD of the centred ratings (spectral_start)",
    )
    ap.add_argument("--cache", type=Path, default=CACHE)
    a = ap.parse_args(argv)
    if a.rank < 1:
        ap.error(f"--rank {a.rank}: give the ratings' rank, at least 1")

    folder = scaling_dataset(a.cache, a.size, a.rank)
    data = resolve_dataset(str(folder)).interactions
    targets = pq.read_table(supplied_targets(folder))
    u = index_of(targets["user"], data.user_ids, "user", "targets")
    i = index_of(targets["item"], data.item_ids, "item", "targets")
    n, lam, mu = len(data), default_lam(len(data)), data.rating_mean()
    print(
        f"{folder.name}: {n:,} ratings, {data.n_users:,} users × {data.n_items:,} items, k = {a.k}, "
        f"{len(u):,} targets, {a.variant}",
        flush=True,
    )
    t0 = time.perf_counter()

    def report(what, U, V, gnorm):
        errors = fidelity(U, V, data, mu, lam, u, i)
        print(f"{what}: {time.perf_counter() - t0:.1f} s, ‖∇f‖ {gnorm:.2e}, {errors}", flush=True)
        if a.spectrum:
            print("   ", spectrum(hs, U, V), flush=True)

    with threadpool_limits(2):
        hs = LocalHalfSteps(data, mu, lam * n / 2.0)
        _, X = hs.initial(data.n_users, data.n_items, a.k, 0)
        if a.init == "svd":
            X = spectral_start(hs, a.k)
            report("spectral start, then a users' half-step", hs.users(X), X, np.nan)
        accelerated = a.variant in ("anderson", "newton-mr", "reduced-newton")
        acc = anderson.Anderson(a.memory, dtype=np.float64 if a.float64 else np.float32) if accelerated else None
        best, refused, accepted, accepted_U = np.inf, 0, None, None  # the first sweep is always accepted
        for sweep in range(1, a.sweeps + 1):
            U = hs.users(X)
            V = hs.items(U)
            rss, gsq, _ = hs.stationarity(U, V, lam, bound=False)
            f = rss / n + 0.5 * lam * (np.vdot(U, U) + np.vdot(V, V))
            if acc and not a.no_guard and f > best + UPHILL_SLACK * abs(best):
                acc.reset()
                X, refused = accepted, refused + 1
                continue
            best, accepted, accepted_U = f, V, U
            if a.variant == "balanced":
                U, V = balanced(U, V)
            if sweep % a.every == 0 or sweep == a.sweeps:
                report(f"sweep {sweep} (f {f:.10f}, {refused} combinations refused)", U, V, float(np.sqrt(gsq)))
            if acc and sweep + 1 < a.sweeps:  # the last sweep plain, as the trainer's (never refused)
                acc.push(V, X)
                X = acc.extrapolate()
            else:
                X = V
        if a.finish_users:
            U = hs.users(accepted)
            rss, gsq, _ = hs.stationarity(U, accepted, lam, bound=False)
            report("users' half-step after the sweeps", U, accepted, float(np.sqrt(gsq)))
        if a.variant == "newton-mr":
            newton_mr(hs, accepted_U, accepted, lam, a.newton, a.products, report)
        if a.reduced_spectrum:
            print("   ", reduced_spectrum(hs, accepted, lam, a.reduced_spectrum), flush=True)
        if a.variant == "reduced-newton":
            reduced_newton(hs, accepted, lam, n, a.newton, a.products, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
