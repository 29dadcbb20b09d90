"""`tidal-contract-exact-multiply-adds`: `x * 2^k + c` as one FMA, where that rounds as eager does.

tidal's elementwise code keeps eager's two roundings (`round(round(x * m) + c)`): LLVM may fuse
a multiply and an add into an FMA (one rounding) only where both carry `contract`, which tidal
sets on its own polynomials alone. For a multiplier m = ±2^k with k <= 0 and a constant addend
c of magnitude at least 2^(emin + p + 2) (p the significand's bits, emin the least normal
exponent: 2^-100 for f32, 2^-967 for f64), the FMA's result is the same bits:
  - x * m is exact unless it falls below the normal range (a power of two only moves the
    exponent; k <= 0 never overflows), so then both forms round the same sum once;
  - where it does fall below (|x * m| < 2^emin), both sums lie closer to c than half the gap
    between c and its neighbours, and both round to c.
NaN and infinities propagate alike; a zero addend is left alone (the sign of a zero sum could
differ). The fused form is shorter on a loop's critical path: a carry updated as
`x * 0.5 + 1`, a while_loop's tiny body, pays one FMA latency (4 cycles on Zen 5) instead of a
multiply's and an add's (3 + 2).

The pass runs on the LLVM dialect, last, where every such pair is an `llvm.fmul` by a constant
(a scalar or a splat vector) whose one use is an `llvm.fadd` / `llvm.fsub` with a constant.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from tidal.passes.registry import tidal_pass

# (least normal exponent, significand bits) of the types the CPU computes in.
_FORMATS = {"f32": (-126, 24), "f64": (-1022, 53)}


@tidal_pass("tidal-contract-exact-multiply-adds",
            "Mark llvm.fmul by ±2^k (k <= 0) + a normal constant `contract`: an FMA with eager's rounding")
def contract_exact_multiply_adds(module_op):
    contract = ir.Attribute.parse("#llvm.fastmath<contract>")
    pairs = []

    def visit(op):
        if op.name == "llvm.fmul":
            addend = _exact_addend_use(op.operation)
            if addend is not None:
                pairs.append((op.operation, addend))
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    for mul, add in pairs:
        mul.attributes["fastmathFlags"] = contract
        add.attributes["fastmathFlags"] = contract


def _exact_addend_use(mul: ir.Operation) -> ir.Operation | None:
    """The fadd/fsub that `mul` feeds, when fusing the two keeps eager's rounding."""
    fmt = _FORMATS.get(str(_element_type(mul.results[0].type)))
    if fmt is None or _has_flags(mul):
        return None
    if not any(_is_scale(v) for v in (_constant(o) for o in mul.operands)):
        return None
    uses = list(mul.results[0].uses)
    if len(uses) != 1:
        return None
    add = uses[0].owner.operation
    if add.name not in ("llvm.fadd", "llvm.fsub") or _has_flags(add):
        return None
    others = [o for o in add.operands if o != mul.results[0]]
    if len(others) != 1:  # the product added to itself
        return None
    addend = _constant(others[0])
    emin, bits = fmt
    if addend is None or not math.isfinite(addend) or abs(addend) < 2.0 ** (emin + bits + 2):
        return None
    return add


def _is_scale(value: float | None) -> bool:
    """±2^k with k <= 0."""
    if value is None or value == 0 or not math.isfinite(value):
        return False
    mantissa, exponent = math.frexp(value)  # value = mantissa * 2^exponent, |mantissa| in [0.5, 1)
    return abs(mantissa) == 0.5 and exponent <= 1


def _constant(value: ir.Value) -> float | None:
    """The float of an `llvm.mlir.constant` scalar or splat vector; None otherwise."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "llvm.mlir.constant":
        return None
    attr = owner.operation.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    if isinstance(attr, ir.DenseFPElementsAttr) and attr.is_splat:
        return ir.FloatAttr(attr.get_splat_value()).value
    return None


def _element_type(t: ir.Type) -> ir.Type:
    return ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t


def _has_flags(op: ir.Operation) -> bool:
    """Flags already set (tidal-fast-math's polynomials, reductions' reassoc) are left as they are."""
    return "fastmathFlags" in op.attributes and str(op.attributes["fastmathFlags"]) != "#llvm.fastmath<none>"
