"""Vector operations numba does not emit by itself, written as LLVM IR (numba intrinsics) for the compiled kernels.

numba runs LLVM's loop vectoriser but not its SLP vectoriser, and the loop vectoriser leaves the explain kernel's
two per-entry passes scalar: 16 running maxima and minima kept as scalars (a float max/min loop is not
vectorised), and the appends of candidate positions (a compress, which it never vectorises). Here they are
spelled as vectors:

- ``lane_extrema16``: portable IR (vector loads, compares and selects); LLVM lowers it for any target;
- ``compress_positions8``: AVX-512's register compress (``vpcompressq``), then a plain vector store. Only where
  numba targets AVX-512 (``HAS_AVX512``; elsewhere it is a typing error, not a compile-time abort); callers keep
  a scalar twin for other machines. The memory form of the compress (LLVM's generic
  ``llvm.masked.compressstore``) is microcoded on AMD's Zen 4, slower there than the scalar appends, so it is
  not used.

numba's cache is keyed on the calling module's source, not on this one's: after editing this file, clear the
callers' caches (``__pycache__/*.nbi``) or touch them.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils, config, errors
from numba.extending import intrinsic


def _host_has_avx512() -> bool:
    """Whether numba compiles for this host with AVX-512F among its target features: numba's own feature list,
    which drops every AVX feature under ``NUMBA_ENABLE_AVX=0`` (numba also sets that itself on CPUs it distrusts).
    A chosen target (``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES``, e.g. for caches shared between machines) keeps
    to portable code."""
    if config.CPU_NAME or config.CPU_FEATURES or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    from numba.core.codegen import get_host_cpu_features

    return "+avx512f" in get_host_cpu_features().split(",")


HAS_AVX512 = _host_has_avx512()

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _splat(builder, value, vec_type):
    """A vector of ``vec_type`` with every lane ``value``."""
    lane0 = builder.insert_element(ir.Constant(vec_type, ir.Undefined), value, ir.Constant(_I32, 0))
    zeros = ir.Constant(ir.VectorType(_I32, vec_type.count), [0] * vec_type.count)
    return builder.shuffle_vector(lane0, ir.Constant(vec_type, ir.Undefined), zeros)


def _check_rows(name, **arrays):
    """Typing-time check of an intrinsic's array arguments: 1-D, C-contiguous, of the dtype its IR reads (the IR
    indexes the data pointer directly, so a strided view or another dtype would read or write out of place)."""
    for arg, (typ, dtype) in arrays.items():
        if not (isinstance(typ, types.Array) and typ.ndim == 1 and typ.layout == "C" and typ.dtype == dtype):
            raise errors.TypingError(f"{name}: {arg} must be a 1-D C-contiguous {dtype} array, got {typ}")


def _vector_at(builder, array, offset, vec_type):
    """A pointer to ``vec_type`` at element ``offset`` of an array's data (unaligned: align 8)."""
    return builder.bitcast(builder.gep(array.data, [offset]), vec_type.as_pointer())


@intrinsic
def lane_extrema16(typingctx, x, full, hi, lo):
    """hi[j], lo[j] ← the max and min of x[j], x[j + 16], … below ``full`` (a positive multiple of 16), j < 16.

    Two 16-double vectors of running extrema over each 16 entries (vmaxpd and vminpd on AVX-512); the same
    values as the scalar loop, since max and min do not round."""
    _check_rows("lane_extrema16", x=(x, types.float64), hi=(hi, types.float64), lo=(lo, types.float64))
    sig = types.void(x, types.int64, hi, lo)

    def codegen(context, builder, signature, args):
        x_a, hi_a, lo_a = (context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 2, 3))
        vec = ir.VectorType(ir.DoubleType(), 16)
        h_ptr, l_ptr = cgutils.alloca_once(builder, vec), cgutils.alloca_once(builder, vec)  # registers after mem2reg
        first = builder.load(_vector_at(builder, x_a, ir.Constant(_I64, 0), vec), align=8)
        builder.store(first, h_ptr)
        builder.store(first, l_ptr)
        blocks = builder.udiv(args[1], ir.Constant(_I64, 16))
        with cgutils.for_range_slice(builder, ir.Constant(_I64, 1), blocks, ir.Constant(_I64, 1)) as (b, _):
            v = builder.load(_vector_at(builder, x_a, builder.mul(b, ir.Constant(_I64, 16)), vec), align=8)
            h, lo_v = builder.load(h_ptr), builder.load(l_ptr)
            builder.store(builder.select(builder.fcmp_ordered(">", v, h), v, h), h_ptr)
            builder.store(builder.select(builder.fcmp_ordered("<", v, lo_v), v, lo_v), l_ptr)
        builder.store(builder.load(h_ptr), _vector_at(builder, hi_a, ir.Constant(_I64, 0), vec), align=8)
        builder.store(builder.load(l_ptr), _vector_at(builder, lo_a, ir.Constant(_I64, 0), vec), align=8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def compress_positions8(typingctx, x, i, tau_hi, tau_lo, c_hi, m_hi, c_lo, m_lo):
    """Append to c_hi[m_hi:] the positions p in i … i + 7 with x[p] ≥ tau_hi, and to c_lo[m_lo:] those with
    x[p] ≤ tau_lo, in order; returns the new (m_hi, m_lo). AVX-512 only (``HAS_AVX512``).

    Each list gets one full 8-slot store, so the slots up to m + 7 are written whatever the count: the caller
    keeps m ≤ i (the counts cannot pass the positions seen), so they stay below i + 8."""
    if not HAS_AVX512:
        raise errors.TypingError("compress_positions8 needs numba to target AVX-512 (simd.HAS_AVX512 is False)")
    _check_rows("compress_positions8", x=(x, types.float64), c_hi=(c_hi, types.int64), c_lo=(c_lo, types.int64))
    sig = types.UniTuple(types.int64, 2)(
        x, types.int64, types.float64, types.float64, c_hi, types.int64, c_lo, types.int64
    )

    def codegen(context, builder, signature, args):
        x_v, i_v, th, tl, ch_v, mh, cl_v, ml = args
        x_a, ch_a, cl_a = (
            context.make_array(signature.args[n])(context, builder, a) for n, a in ((0, x_v), (4, ch_v), (6, cl_v))
        )
        vd, vi, vb = ir.VectorType(ir.DoubleType(), 8), ir.VectorType(_I64, 8), ir.VectorType(ir.IntType(1), 8)
        v = builder.load(_vector_at(builder, x_a, i_v, vd), align=8)
        positions = builder.add(_splat(builder, i_v, vi), ir.Constant(vi, list(range(8))))
        module = builder.module
        name = "llvm.x86.avx512.mask.compress.v8i64"
        compress = module.globals.get(name) or ir.Function(module, ir.FunctionType(vi, [vi, vi, vb]), name)
        name = "llvm.ctpop.i8"
        i8 = ir.IntType(8)
        popcount = module.globals.get(name) or ir.Function(module, ir.FunctionType(i8, [i8]), name)
        counts = []
        for op, tau, c_a, m in ((">=", th, ch_a, mh), ("<=", tl, cl_a, ml)):
            mask = builder.fcmp_ordered(op, v, _splat(builder, tau, vd))
            packed = builder.call(compress, [positions, ir.Constant(vi, [0] * 8), mask])
            builder.store(packed, _vector_at(builder, c_a, m, vi), align=8)
            n = builder.call(popcount, [builder.bitcast(mask, i8)])
            counts.append(builder.add(m, builder.zext(n, _I64)))
        return context.make_tuple(builder, signature.return_type, counts)

    return sig, codegen
