"""Explicit SIMD vectors for numba-compiled code: a value type of LANES floats (or integers) and the few
operations the MCLR kernel needs (fedsim.core.kernel).

numba compiles without LLVM's SLP vectoriser, and its loop vectoriser keeps accumulators in
registers only for some loop shapes (benchmarks/peak.py says which were tried), so a kernel
written as scalar loops runs far below the core's FMA peak. Here a `Vector` is an LLVM
<LANES x float> value: a numba variable of that type lives in vector registers, and each
function below is one or a few LLVM vector instructions. LLVM splits a vector wider than the
host's registers into several (8 float64 lanes: two 256-bit registers on AVX2, four on SSE), so
the same code runs everywhere numba does.

    load(a, i)        a[i:i + LANES] of a C-contiguous array: i an integer (1-D) or a tuple
                      (r, j) for a[r, j:j + LANES], (k, r, j) for a[k, r, j:j + LANES]; unaligned
    store(a, i, v)    the same lanes <- v
    splat(s)          s in every lane
    like(s, t)        s converted to t's float type
    fma(a, b, c)      a * b + c (fused where the host has FMA: llvm.fmuladd)
    add, sub, mul, div  lane by lane; iadd for integer lanes
    load_be16(a, i)   LANES big-endian 16-bit words at bytes a[i:] of a uint8 array, as uint32 lanes
    load_float64(a, i)  load(a, i) of a float array, as float64 lanes (exact)
    load_as(a, i, t)  load(a, i) of an integer array (labels), converted to t's float type
    where_equal(a, b, x, y)  x where a == b, else y, lane by lane
    max(a, b)         the larger, lane by lane (a NaN in a is dropped: callers let NaN through exp)
    argmax_step(b, i, z, c)  the running (largest, its index) after class c's z, torch's rule
    store_hsum4(o, i, a, b, c, d)  the four vectors' lane sums stored at o[i:i + 4] in one store, as
                      fixed trees (the same order every call) sharing their shuffles
    store_transposed(o, (r, j), a0, .., a7)  o[r + c, j + i] = lane c of a_i for c, i < 8 (LANES = 8): an
                      8 x 8 transpose in registers, eight row stores
    exp(v)            e ** v lane by lane: a polynomial for float32, libm's exp for float64
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

LANES = 8


class Vector(types.Type):
    """LANES lanes of a float type, held in vector registers."""

    def __init__(self, dtype):
        self.dtype = dtype
        super().__init__(name=f"Vector({dtype} x {LANES})")


@register_model(Vector)
class _VectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(dmm.lookup(fe_type.dtype).get_value_type(), LANES))


def _indexes(a, index) -> bool:
    # a C-contiguous float or integer array and an integer index (1-D) or a tuple of a.ndim integers
    if not (isinstance(a, types.Array) and a.layout == "C" and isinstance(a.dtype, (types.Float, types.Integer))):
        return False
    if isinstance(index, types.Integer):
        return a.ndim == 1
    return isinstance(index, types.BaseTuple) and len(index) == a.ndim and \
        all(isinstance(i, types.Integer) for i in index)


def _lane_pointer(context, builder, array_type, array, index_type, index):
    # a pointer to a[index] as a vector pointer; no view of a is made (views cost reference counts)
    indices = [index] if isinstance(index_type, types.Integer) else cgutils.unpack_tuple(builder, index)
    kinds = [index_type] if isinstance(index_type, types.Integer) else list(index_type)
    indices = [context.cast(builder, i, kind, types.intp) for i, kind in zip(indices, kinds)]
    array = context.make_array(array_type)(context, builder, value=array)
    element = cgutils.get_item_pointer(context, builder, array_type, array, indices, wraparound=False)
    return builder.bitcast(element, context.get_value_type(Vector(array_type.dtype)).as_pointer())


@intrinsic
def load(typingctx, a, index):
    if not _indexes(a, index):
        return None

    def codegen(context, builder, signature, args):
        pointer = _lane_pointer(context, builder, a, args[0], index, args[1])
        return builder.load(pointer, align=a.dtype.bitwidth // 8)

    return Vector(a.dtype)(a, index), codegen


@intrinsic
def store(typingctx, a, index, v):
    if not (_indexes(a, index) and v == Vector(a.dtype)):
        return None

    def codegen(context, builder, signature, args):
        pointer = _lane_pointer(context, builder, a, args[0], index, args[1])
        builder.store(args[2], pointer, align=a.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(a, index, v), codegen


def _splat(builder, value, vector_type):
    one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, ir.Constant(vector_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))


@intrinsic
def splat(typingctx, s):
    if not isinstance(s, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        return _splat(builder, args[0], context.get_value_type(Vector(s)))

    return Vector(s)(s), codegen


@intrinsic
def like(typingctx, value, example):
    """value converted to example's float type (numba widens float32 arithmetic with integers)."""
    if not (isinstance(value, (types.Float, types.Integer)) and isinstance(example, types.Float)):
        return None

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], value, example)

    return example(value, example), codegen


def _binary(name, lanes=types.Float):
    def typer(typingctx, a, b):
        if not (isinstance(a, Vector) and a == b and isinstance(a.dtype, lanes)):
            return None

        def codegen(context, builder, signature, args):
            return getattr(builder, name)(*args)

        return a(a, b), codegen

    typer.__name__ = name
    return intrinsic(typer)


add, sub, mul, div = _binary("fadd"), _binary("fsub"), _binary("fmul"), _binary("fdiv")
iadd = _binary("add", types.Integer)  # modulo 2 ** bits


@intrinsic
def load_be16(typingctx, a, index):
    """The LANES big-endian 16-bit words at bytes a[index:index + 2 LANES] of a uint8 array, as
    uint32 lanes (Fletcher-32's words: fedsim.data); unaligned."""
    if not (_indexes(a, index) and a.dtype == types.uint8 and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        words = ir.VectorType(ir.IntType(16), LANES)
        pointer = builder.bitcast(_lane_pointer(context, builder, a, args[0], index, args[1]), words.as_pointer())
        swap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(words, [words]),
                                              f"llvm.bswap.v{LANES}i16")
        return builder.zext(builder.call(swap, [builder.load(pointer, align=1)]), ir.VectorType(ir.IntType(32), LANES))

    return Vector(types.uint32)(a, index), codegen


@intrinsic
def load_float64(typingctx, a, index):
    """load(a, index) of a float32 or float64 array, widened to float64 lanes (exact)."""
    if not (_indexes(a, index) and isinstance(a.dtype, types.Float)):
        return None

    def codegen(context, builder, signature, args):
        lanes = builder.load(_lane_pointer(context, builder, a, args[0], index, args[1]), align=a.dtype.bitwidth // 8)
        return lanes if a.dtype == types.float64 else builder.fpext(lanes, context.get_value_type(Vector(types.float64)))

    return Vector(types.float64)(a, index), codegen


@intrinsic
def load_as(typingctx, a, index, example):
    """load(a, index) of an integer array (int64 lanes narrowed to 32 bits first: labels, classes),
    converted to example's float type."""
    if not (_indexes(a, index) and isinstance(a.dtype, types.Integer) and isinstance(example, types.Float)):
        return None

    def codegen(context, builder, signature, args):
        lanes = builder.load(_lane_pointer(context, builder, a, args[0], index, args[1]), align=a.dtype.bitwidth // 8)
        if a.dtype.bitwidth > 32:
            lanes = builder.trunc(lanes, ir.VectorType(ir.IntType(32), LANES))
        return builder.sitofp(lanes, context.get_value_type(Vector(example)))

    return Vector(example)(a, index, example), codegen


@intrinsic
def where_equal(typingctx, a, b, x, y):
    if not (isinstance(a, Vector) and a == b and isinstance(x, Vector) and x == y):
        return None

    def codegen(context, builder, signature, args):
        return builder.select(builder.fcmp_ordered("==", args[0], args[1]), args[2], args[3])

    return x(a, b, x, y), codegen


def _larger(builder, a, b):
    # a > b ? a : b, lane by lane: a NaN in a is dropped, as x86's maxps drops it
    return builder.select(builder.fcmp_ordered(">", a, b), a, b)


@intrinsic
def max(typingctx, a, b):  # noqa: A001 (simd.max, as the other lane-by-lane operations)
    if not (isinstance(a, Vector) and a == b):
        return None

    def codegen(context, builder, signature, args):
        return _larger(builder, *args)

    return a(a, b), codegen


@intrinsic
def argmax_step(typingctx, best, index, z, c):
    """(best, index) after class c's logits z, lane by lane: z is taken where it is larger than
    best, or NaN where best is not (torch's argmax: the first largest, or the first NaN)."""
    if not (isinstance(best, Vector) and best == index == z and isinstance(c, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        best_, index_, z_, c_ = args
        larger = builder.fcmp_ordered(">", z_, best_)
        first_nan = builder.and_(builder.fcmp_unordered("uno", z_, z_), builder.fcmp_ordered("ord", best_, best_))
        take = builder.or_(larger, first_nan)
        label = _splat(builder, context.cast(builder, c_, c, best.dtype), z_.type)
        values = [builder.select(take, z_, best_), builder.select(take, label, index_)]
        return context.make_tuple(builder, signature.return_type, values)

    return types.UniTuple(best, 2)(best, index, z, c), codegen


def _vector_intrinsic(builder, name, vector_type, count):
    lane = vector_type.element
    suffix = f"v{LANES}f{64 if isinstance(lane, ir.DoubleType) else 32}"
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector_type, [vector_type] * count),
                                          f"llvm.{name}.{suffix}")


@intrinsic
def fma(typingctx, a, b, c):
    if not (isinstance(a, Vector) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        return builder.call(_vector_intrinsic(builder, "fmuladd", args[0].type, 3), args)

    return a(a, b, c), codegen


def _pick(builder, a, b, lanes):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes))


def _sums4(builder, a, b, c, d):
    # <4 x T> of the four vectors' sums: one tree whose shuffles serve all four
    half, quarter = LANES // 2, LANES // 4
    low, high = list(range(half)), list(range(half, LANES))
    # each vector's halves added, two vectors per result: [a a .. b b ..], [c c .. d d ..]
    ab = builder.fadd(_pick(builder, a, b, low + [LANES + i for i in low]),
                      _pick(builder, a, b, high + [LANES + i for i in high]))
    cd = builder.fadd(_pick(builder, c, d, low + [LANES + i for i in low]),
                      _pick(builder, c, d, high + [LANES + i for i in high]))
    # quarters added: [a .. b .. c .. d ..], LANES / 4 partial sums each
    even = [q * quarter + i for q in (0, 2) for i in range(quarter)]
    odd = [q * quarter + i for q in (1, 3) for i in range(quarter)]
    value = builder.fadd(_pick(builder, ab, cd, even + [LANES + i for i in even]),
                         _pick(builder, ab, cd, odd + [LANES + i for i in odd]))
    width = LANES
    while width > 4:  # neighbours added within each group
        value = builder.fadd(_pick(builder, value, value, list(range(0, width, 2))),
                             _pick(builder, value, value, list(range(1, width, 2))))
        width //= 2
    return value


@intrinsic
def store_hsum4(typingctx, out, index, a, b, c, d):
    """out[index:index + 4] = the lane sums of a, b, c and d, as one store (the four places must exist)."""
    if not (_indexes(out, index) and isinstance(a, Vector) and a == b == c == d and a.dtype == out.dtype):
        return None

    def codegen(context, builder, signature, args):
        pointer = _lane_pointer(context, builder, out, args[0], index, args[1])
        value = _sums4(builder, *args[2:])
        builder.store(value, builder.bitcast(pointer, value.type.as_pointer()), align=out.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(out, index, a, b, c, d), codegen


def _transposed8(builder, rows):
    # the 8 x 8 transpose of eight <8 x T> vectors (vector i's lane c -> vector c's lane i) in the three
    # rounds of shuffles that AVX2 has instructions for: pairs interleaved, then quads, then halves
    low, high = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
    t = [_pick(builder, rows[i], rows[i + 1], mask) for i in range(0, 8, 2) for mask in (low, high)]
    even, odd = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
    q = [_pick(builder, t[i], t[i + 2], mask) for i in (0, 1, 4, 5) for mask in (even, odd)]
    first, second = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    out = [None] * 8
    for c in range(4):
        out[c], out[c + 4] = _pick(builder, q[c], q[c + 4], first), _pick(builder, q[c], q[c + 4], second)
    return out


@intrinsic
def store_transposed(typingctx, out, index, a0, a1, a2, a3, a4, a5, a6, a7):
    """out[r + c, j + i] = lane c of a_i, for c, i < 8, index = (r, j) of a 2-D array (LANES = 8)."""
    vectors = (a0, a1, a2, a3, a4, a5, a6, a7)
    if not (LANES == 8 and _indexes(out, index) and out.ndim == 2 and isinstance(a0, Vector)
            and all(a == a0 for a in vectors) and a0.dtype == out.dtype):
        return None

    def codegen(context, builder, signature, args):
        row, column = cgutils.unpack_tuple(builder, args[1])
        row = context.cast(builder, row, index[0], types.intp)
        for c, value in enumerate(_transposed8(builder, args[2:])):
            at = context.make_tuple(builder, types.UniTuple(types.intp, 2),
                                    [builder.add(row, ir.Constant(row.type, c)),
                                     context.cast(builder, column, index[1], types.intp)])
            pointer = _lane_pointer(context, builder, out, args[0], types.UniTuple(types.intp, 2), at)
            builder.store(value, pointer, align=out.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(out, index, *vectors), codegen


# float32 e**x as in Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so n ln2
# is exact), e**r by a degree-7 polynomial (about 1 ulp), 2**n built in the exponent bits.
_EXP_LOW, _EXP_HIGH = -87.33654, 88.37626   # e**x stays a normal float32 in between
_LOG2E, _LN2_HIGH, _LN2_LOW = 1.44269504088896341, 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def _exp_float32(builder, x):
    vec = x.type
    const = lambda c: ir.Constant(vec, [c] * LANES)  # noqa: E731
    # clamped with ordered comparisons, so that NaN passes through (and makes the result NaN)
    x = builder.select(builder.fcmp_ordered("<", x, const(_EXP_LOW)), const(_EXP_LOW), x)
    x = builder.select(builder.fcmp_ordered(">", x, const(_EXP_HIGH)), const(_EXP_HIGH), x)
    floor = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec]), f"llvm.floor.v{LANES}f32")
    n = builder.call(floor, [builder.fadd(builder.fmul(x, const(_LOG2E)), const(0.5))])
    r = builder.fsub(builder.fsub(x, builder.fmul(n, const(_LN2_HIGH))), builder.fmul(n, const(_LN2_LOW)))
    poly = const(_EXP_POLY[0])
    for c in _EXP_POLY[1:]:
        poly = builder.fadd(builder.fmul(poly, r), const(c))
    y = builder.fadd(builder.fadd(builder.fmul(poly, builder.fmul(r, r)), r), const(1.0))
    # 2**n: n + 127 in the exponent field. fptosi of NaN is poison, so NaN lanes take n = 0 first
    # (their y is NaN already).
    n = builder.select(builder.fcmp_ordered("==", n, n), n, const(0.0))
    bits = builder.shl(builder.add(builder.fptosi(n, ir.VectorType(ir.IntType(32), LANES)),
                                   ir.Constant(ir.VectorType(ir.IntType(32), LANES), [127] * LANES)),
                       ir.Constant(ir.VectorType(ir.IntType(32), LANES), [23] * LANES))
    return builder.fmul(y, builder.bitcast(bits, vec))


@intrinsic
def exp(typingctx, v):
    if not isinstance(v, Vector):
        return None

    def codegen(context, builder, signature, args):
        if v.dtype == types.float32:
            return _exp_float32(builder, args[0])
        return builder.call(_vector_intrinsic(builder, "exp", args[0].type, 1), args)

    return v(v), codegen
