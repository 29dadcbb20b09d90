"""Integer division, remainder and fmod with eager's semantics, and never a hardware trap.

Eager PyTorch on the CPU floors `//` and gives `%` the sign of the divisor (Python's rules), and a
zero divisor raises `RuntimeError('ZeroDivisionError')`. torch-mlir's lowerings do not: integer
floor division goes through f64 (wrong beyond 2^53), and `arith.divsi`/`remsi` by zero (or of the
minimum integer by -1) is undefined in LLVM and traps (SIGFPE) on x86. Two passes:

- `tidal-integer-division` (torch level, before decompositions, so fmod is still fmod): every
  integer floor/trunc division, remainder and fmod becomes exact integer arithmetic built on ONE
  truncating division q = trunc(a / b) and f = a - q * b (fmod's result):
    floor     = q - 1 where f != 0 and f, b differ in sign, else q
    remainder = f + b under the same condition, else f
  and, unless the divisor is a nonzero constant, a check: when a divisor is zero, the native code
  calls the same ATen operator on (1, 0), which raises eager's own error; it reaches the caller
  as every error in an ATen call does (`tidal.runtime.errors`), after the compiled function
  returns (`tidal.passes.error_checks`; eager CUDA does not check, and the GPU backend drops it).
- `tidal-guard-integer-division` (linalg level, after torch-mlir's lowering): every integer
  `arith` division divides by 1 where the divisor is 0 or -1, and a quotient by -1 is the
  wrapping negation: min // -1 == min and min % -1 == 0 as eager computes them (eager's trunc
  division of the minimum int32/int64 by -1 dies of SIGFPE; tidal gives the minimum, as eager
  does for int16). The values computed for a zero divisor are never returned: the check raises.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects.aten_call import build_aten_call
from tidal.dialects.types import TensorSpec, tensor_spec
from tidal.passes.error_checks import raise_if
from tidal.passes.registry import ops_named, tidal_pass


# op -> its rounding (None: the op's `rounding_mode` operand says), for integer results only
_DIVISIONS = {
    "torch.aten.div.Tensor_mode": None,
    "torch.aten.div.Scalar_mode": None,
    # torch's own div.Tensor of integers is true division (a float result); integer-typed ones
    # come from decompositions and truncate, as torch-mlir lowers them
    "torch.aten.div.Tensor": "trunc",
    "torch.aten.div.Scalar": "trunc",
    "torch.aten.floor_divide": "floor",
    "torch.aten.floor_divide.Scalar": "floor",
    "torch.aten.remainder.Tensor": "remainder",
    "torch.aten.remainder.Scalar": "remainder",
    "torch.aten.remainder.Scalar_Tensor": "remainder",
    "torch.aten.fmod.Tensor": "fmod",
    "torch.aten.fmod.Scalar": "fmod",
}
# the eager operator whose error a zero divisor raises: (callee, overload, rounding_mode or None)
_RAISING = {
    "floor": ("aten::div", "Tensor_mode", "floor"),
    "trunc": ("aten::div", "Tensor_mode", "trunc"),
    "remainder": ("aten::remainder", "Tensor", None),
    "fmod": ("aten::fmod", "Tensor", None),
}
_OPERATOR = "torch.operator"
_SCALAR_TYPE = {"si64": 4, "si32": 3, "si16": 2, "si8": 1, "ui8": 0}


def _create(name: str, result_type: ir.Type, operands, attributes=None) -> ir.Value:
    return ir.Operation.create(name, results=[result_type], operands=list(operands), attributes=attributes).result


def _torch_type(text: str) -> ir.Type:
    return ir.Type.parse(text)


def _int(v: int) -> ir.Value:
    return _create("torch.constant.int", _torch_type("!torch.int"), [],
                   {"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)})


def _str(s: str) -> ir.Value:
    return _create("torch.constant.str", _torch_type("!torch.str"), [], {"value": ir.StringAttr.get(s)})


def _constant_of(value: ir.Value):
    """The Python value of a torch constant operand, else None."""
    owner = value.owner if isinstance(value, ir.OpResult) else None
    if owner is None:
        return None
    name = owner.operation.name
    if name in ("torch.constant.int", "torch.constant.str"):
        a = owner.attributes["value"]
        return ir.StringAttr(a).value if name == "torch.constant.str" else ir.IntegerAttr(a).value
    if name == "torch.vtensor.literal":
        try:
            return [int(v) for v in ir.DenseIntElementsAttr(owner.attributes["value"])]
        except (TypeError, ValueError):
            return None
    return None


def _wrapped(v: int, dtype: str) -> int:
    """`v` as the dtype holds it (eager converts a divisor to the result's dtype)."""
    bits = int(dtype[2:])
    v &= (1 << bits) - 1
    return v - (1 << bits) if dtype.startswith("si") and v >> (bits - 1) else v


def _nonzero_constant(value: ir.Value, dtype: str) -> bool:
    c = _constant_of(value)
    values = c if isinstance(c, list) else [c] if isinstance(c, int) else None
    return bool(values) and all(_wrapped(v, dtype) != 0 for v in values)


def _as_tensor(value: ir.Value, dtype: str) -> ir.Value:
    """A tensor operand of `dtype`: a Python int as a 0-d tensor, another dtype converted."""
    if str(value.type) == "!torch.int":
        value = _create("torch.prim.NumToTensor.Scalar", _torch_type("!torch.vtensor<[],si64>"), [value])
    spec = tensor_spec(value.type)
    if spec.dtype == dtype:
        return value
    none, false = (_create("torch.constant.none", _torch_type("!torch.none"), []),
                   _create("torch.constant.bool", _torch_type("!torch.bool"), [], {"value": ir.BoolAttr.get(False)}))
    return _create("torch.aten.to.dtype", TensorSpec(spec.shape, dtype, torch=True).to_type(),
                   [value, _int(_SCALAR_TYPE[dtype]), false, false, none])


def _raise_if_zero(b: ir.Value, mode: str) -> None:
    """If any element of `b` is zero, call the eager operator on (1, 0): it raises eager's error."""
    spec = tensor_spec(b.type)
    zero = _create("torch.aten.eq.Scalar", TensorSpec(spec.shape, "i1", torch=True).to_type(), [b, _int(0)])
    if spec.rank:
        zero = _create("torch.aten.any", _torch_type("!torch.vtensor<[],i1>"), [zero])

    def call_on_one_and_zero():
        scalar = _torch_type("!torch.vtensor<[],si64>")
        one, nought = (_create("torch.prim.NumToTensor.Scalar", scalar, [_int(v)]) for v in (1, 0))
        callee, overload, rounding = _RAISING[mode]
        index = ir.IndexType.get()
        args = [ir.IntegerAttr.get(index, 0), ir.IntegerAttr.get(index, 1)]
        if rounding is not None:
            args.append(ir.StringAttr.get(rounding))
        return build_aten_call(callee, overload, [one, nought], args, [scalar])

    raise_if(_create("torch.aten.Bool.Tensor", _torch_type("!torch.bool"), [zero]), call_on_one_and_zero)


def _rewrite(op: ir.Operation, mode: str) -> ir.Value:
    result_type = op.results[0].type
    spec = tensor_spec(result_type)
    dtype, flags = spec.dtype, TensorSpec(spec.shape, "i1", torch=True).to_type()
    a, b = (_as_tensor(v, dtype) for v in list(op.operands)[:2])
    if not _nonzero_constant(op.operands[1], dtype):
        _raise_if_zero(b, mode)
    q = _create("torch.aten.div.Tensor_mode", result_type, [a, b, _str("trunc")])
    if mode == "trunc":
        return q
    one = _int(1)
    f = _create("torch.aten.sub.Tensor", result_type, [a, _create("torch.aten.mul.Tensor", result_type, [q, b]), one])
    if mode == "fmod":
        return f
    # f and b differ in sign exactly when f ^ b is negative
    inexact = _create("torch.aten.ne.Scalar", flags, [f, _int(0)])
    signs_differ = _create("torch.aten.lt.Scalar", flags, [_create("torch.aten.bitwise_xor.Tensor", result_type, [f, b]), _int(0)])
    adjust = _create("torch.aten.bitwise_and.Tensor", flags, [inexact, signs_differ])
    if mode == "floor":
        return _create("torch.aten.where.self", result_type, [adjust, _create("torch.aten.sub.Scalar", result_type, [q, one, one]), q])
    return _create("torch.aten.where.self", result_type, [adjust, _create("torch.aten.add.Tensor", result_type, [f, b, one]), f])


def _name(op: ir.Operation) -> str:
    """The aten op's name; torch-mlir imports one it does not know (remainder.Scalar_Tensor) as a
    `torch.operator` naming it."""
    return ir.StringAttr(op.attributes["name"]).value if op.name == _OPERATOR else op.name


def _mode(op: ir.Operation) -> str | None:
    if _name(op) not in _DIVISIONS or len(op.results) != 1:
        return None
    spec = tensor_spec(op.results[0].type)
    if spec is None or not spec.dtype.startswith(("si", "ui")):
        return None
    mode = _DIVISIONS[_name(op)]
    if mode is None:
        mode = _constant_of(op.operands[2])
    return mode if mode in _RAISING else None


@tidal_pass(
    "tidal-integer-division",
    "Integer floor/trunc division, remainder and fmod as exact integer arithmetic, a zero divisor raising as in eager",
)
def integer_division(module_op):
    for op in ops_named(module_op, (*_DIVISIONS, _OPERATOR)):
        mode = _mode(op)
        if mode is None:
            continue
        with ir.InsertionPoint(op), op.location:
            value = _rewrite(op, mode)
        op.results[0].replace_all_uses_with(value)
        op.erase()


_SIGNED = ("arith.divsi", "arith.remsi", "arith.floordivsi", "arith.ceildivsi")
_UNSIGNED = ("arith.divui", "arith.remui", "arith.ceildivui")


@tidal_pass(
    "tidal-guard-integer-division",
    "Integer arith divisions divide by 1 where the divisor is 0 or -1 (no trap; min // -1 wraps as in eager)",
)
def guard_integer_division(module_op):
    from torch_mlir.dialects import arith

    for op in ops_named(module_op, _SIGNED + _UNSIGNED):
        t = op.results[0].type
        if not isinstance(t, ir.IntegerType):  # index arithmetic: sizes and offsets tidal computes
            continue
        a, b = op.operands[0], op.operands[1]
        signed = op.name in _SIGNED
        with ir.InsertionPoint(op), op.location:
            zero, one = (arith.ConstantOp(t, v).result for v in (0, 1))
            bad = arith.CmpIOp(arith.CmpIPredicate.eq, b, zero).result
            if signed:
                minus_one = arith.CmpIOp(arith.CmpIPredicate.eq, b, arith.ConstantOp(t, -1).result).result
                bad = arith.OrIOp(bad, minus_one).result
            op.operands[1] = arith.SelectOp(bad, one, b).result
        if not signed or op.name == "arith.remsi":  # x % 1 == x % -1 == 0
            continue
        with ir.InsertionPoint.after(op), op.location:
            negated = arith.SubIOp(zero, a).result
            quotient = arith.SelectOp(minus_one, negated, op.results[0])
        op.results[0].replace_all_uses_except(quotient.result, quotient.operation)
