"""`tidal-fast-math`: f32 `math.tanh` → a rational polynomial in arith (vectorizable).

Lowered as is, `math.tanh` becomes one scalar libm `tanhf` call per element, which keeps LLVM
from vectorizing the elementwise loops around it (measured: the tanh of an RNN step dominated the
step). The replacement is the clamped 13/6 rational approximation Eigen uses for float tanh
(accurate to a few ulp; exact ±1 saturation beyond |x| ≈ 7.9), built from mul/add/div/min/max,
which LLVM's loop vectorizer turns into SIMD code.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith

from tidal.passes.registry import tidal_pass

_CLAMP = 7.90531110763549805
_ALPHA = [  # odd numerator coefficients, alpha_13 ... alpha_1
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
]
_BETA = [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03]
_TINY = 0.0004


def _c(v: float, t: ir.Type) -> ir.Value:
    return arith.ConstantOp(t, ir.FloatAttr.get(t, v)).result


def _horner(x2: ir.Value, coeffs: list[float], t: ir.Type) -> ir.Value:
    acc = _c(coeffs[0], t)
    for c in coeffs[1:]:
        acc = arith.AddFOp(arith.MulFOp(acc, x2).result, _c(c, t)).result
    return acc


def _fast_tanh(x: ir.Value) -> ir.Value:
    t = x.type
    clamped = arith.MinimumFOp(arith.MaximumFOp(x, _c(-_CLAMP, t)).result, _c(_CLAMP, t)).result
    x2 = arith.MulFOp(clamped, clamped).result
    p = arith.MulFOp(clamped, _horner(x2, _ALPHA, t)).result
    q = _horner(x2, _BETA, t)
    ratio = arith.DivFOp(p, q).result
    absx = arith.MaximumFOp(x, arith.NegFOp(x).result).result
    tiny = arith.CmpFOp(arith.CmpFPredicate.OLT, absx, _c(_TINY, t)).result
    return arith.SelectOp(tiny, x, ratio).result


@tidal_pass("tidal-fast-math", "Expand f32 math.tanh into a vectorizable rational approximation")
def fast_math(module_op):
    tanhs = []

    def collect(op):
        if op.name == "math.tanh" and str(op.results[0].type) == "f32":
            tanhs.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(collect)
    for op in tanhs:
        with ir.InsertionPoint(op), op.location:
            value = _fast_tanh(op.operands[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
