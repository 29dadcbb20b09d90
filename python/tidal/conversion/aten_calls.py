"""`tidal-aten-calls`: aten ops that run as ATen library kernels become `tidal.aten_call`.

Two kinds of ops take this path, at the torch level (loop bodies included):
- library kernels: ops ATen runs much faster than torch-mlir's lowering would (convolution and
  batched matmul on MKL/oneDNN, sorting, scatter/index_put, fused attention), listed below with
  the reason;
- with `leftovers`, every aten op torch-mlir's conversions left unlowered, and every
  `torch.operator` (an op torch-mlir does not know, e.g. PyTorch's fused transformer fast path).
Each becomes ONE op naming the operator and overload, its non-tensor arguments as attributes
(`tidal.dialects.aten_call`), so the native code calls ATen's dispatcher through the stable C ABI
(`tidal.backends.cpu.aten_runtime`). An op whose arguments cannot be encoded (a `Scalar`, a size
computed at run time) stays as it is: torch-mlir lowers it, or tidal reports it.
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from tidal.diagnostics import TidalUnsupported
from tidal.dialects.aten_call import build_aten_call
from tidal.dialects.types import tensor_spec
from tidal.passes.registry import tidal_pass

# torch dialect op name -> why ATen's kernel is used rather than torch-mlir's lowering.
LIBRARY_KERNELS = {
    "torch.aten.convolution": "oneDNN convolution; linalg's convolution runs as naive loops",
    "torch.aten.bmm": "a library gemm per batch entry (the CPU backend calls BLAS itself: blas.bmm_as_batch_matmul)",
    "torch.aten.baddbmm": "MKL batched gemm",
    "torch.aten.sort": "ATen's sort; torch-mlir's tm_tensor.sort lowers to a quadratic sort",
    "torch.aten.topk": "ATen's partial sort; torch-mlir lowers topk through a full quadratic sort",
    "torch.aten.scatter.src": "ATen's scatter kernel",
    "torch.aten.scatter_add": "ATen's scatter kernel",
    "torch.aten.scatter_reduce.two": "ATen's scatter kernel",
    "torch.aten.index_put": "ATen's index_put (bounds-checked like eager)",
    "torch.aten.index_put.hacked_twin": "ATen's index_put (bounds-checked like eager)",
    "torch.aten._index_put_impl": "ATen's index_put (bounds-checked like eager)",
    "torch.aten._scaled_dot_product_flash_attention_for_cpu": "ATen's fused CPU flash attention",
    "torch.aten.scaled_dot_product_attention": "ATen's fused CPU attention",
}
OPERATOR = "torch.operator"


def aten_name(op: ir.Operation) -> tuple[str, str] | None:
    """('aten::sort', '') for `torch.aten.sort`, ('aten::scatter', 'src') for `torch.aten.scatter.src`."""
    name = ir.StringAttr(op.attributes["name"]).value if op.name == OPERATOR else op.name
    parts = name.split(".")
    if len(parts) not in (3, 4) or parts[0] != "torch" or parts[1] != "aten":
        return None
    return f"aten::{parts[2]}", parts[3] if len(parts) == 4 else ""


def schema_of(callee: str, overload: str):
    try:
        return torch._C._get_schema(callee, overload)
    except RuntimeError:
        return None


class _NotEncodable(Exception):
    pass


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _defining_op(value: ir.Value):
    return None if isinstance(value, ir.BlockArgument) else value.owner


# After convert-torch-to-arith, a torch constant reaches the ops left unlowered through a cast.
_SCALAR_CASTS = ("torch_c.from_i64", "torch_c.from_f64", "torch_c.from_i1")


def _constant(value: ir.Value):
    """The Python value of a torch constant operand (None for `torch.constant.none`)."""
    op = _defining_op(value)
    name = op.name if op is not None else None
    if name in _SCALAR_CASTS:
        inner = _defining_op(op.operands[0])
        if inner is not None and inner.name == "arith.constant":
            a = inner.attributes["value"]
            if name == "torch_c.from_i1":
                return bool(ir.IntegerAttr(a).value)
            return a.value
        raise _NotEncodable(f"a non-constant {value.type} argument")
    if name == "torch.constant.none":
        return None
    if name in ("torch.constant.int", "torch.constant.bool", "torch.constant.float", "torch.constant.str"):
        a = op.attributes["value"]
        if name == "torch.constant.str":
            return ir.StringAttr(a).value
        if name == "torch.constant.bool":
            return ir.BoolAttr(a).value
        return a.value
    raise _NotEncodable(f"a non-constant {value.type} argument")


# Element types a compiled program can hand to ATen (complex numbers do not reach native code).
CALLABLE_DTYPES = ("f16", "bf16", "f32", "f64", "si64", "si32", "si16", "si8", "ui8", "i1")


def _is_tensor(value: ir.Value) -> bool:
    spec = tensor_spec(value.type)
    return spec is not None and spec.torch and spec.dtype in CALLABLE_DTYPES


def _encode(value: ir.Value, schema_type, tensors: list[ir.Value], scalars: bool = False) -> ir.Attribute:
    """The `args` entry for one schema argument; tensor values are appended to `tensors`. A
    constant `Scalar` is encoded only with `scalars` (the GPU plan's calls take them; the native
    calls' C ABI does not)."""
    kind = schema_type
    if isinstance(kind, torch.OptionalType):
        if _defining_op(value) is not None and value.owner.name == "torch.constant.none":
            return ir.UnitAttr.get()
        kind = kind.getElementType()
    if isinstance(kind, torch.TensorType):
        if not _is_tensor(value):
            raise _NotEncodable(f"a {value.type} where a tensor is expected")
        tensors.append(value)
        return ir.IntegerAttr.get(ir.IndexType.get(), len(tensors) - 1)
    if isinstance(kind, torch.ListType):
        op = _defining_op(value)
        if op is None or op.name != "torch.prim.ListConstruct":
            raise _NotEncodable(f"a list argument ({value.type}) not built from known elements")
        element = kind.getElementType()
        items = list(op.operands)
        if isinstance(element, (torch.IntType, torch.SymIntType)):
            values = [_constant(v) for v in items]
            if not all(isinstance(v, int) for v in values):
                raise _NotEncodable("an int list with non-constant elements")
            return ir.DenseI64ArrayAttr.get(values)
        inner = element.getElementType() if isinstance(element, torch.OptionalType) else element
        if isinstance(inner, torch.TensorType):
            return ir.ArrayAttr.get([_encode(v, element, tensors) for v in items])
        raise _NotEncodable(f"a list of {element}")
    if isinstance(kind, (torch.IntType, torch.SymIntType, torch.BoolType, torch.FloatType, torch.StringType)):
        v = _constant(value)
        if isinstance(kind, torch.BoolType) and isinstance(v, bool):
            return ir.BoolAttr.get(v)
        if isinstance(kind, (torch.IntType, torch.SymIntType)) and isinstance(v, int) and not isinstance(v, bool):
            return _i64(v)
        if isinstance(kind, torch.FloatType) and isinstance(v, (int, float)):
            return ir.FloatAttr.get(ir.F64Type.get(), float(v), loc=ir.Location.unknown())
        if isinstance(kind, torch.StringType) and isinstance(v, str):
            return ir.StringAttr.get(v)
        raise _NotEncodable(f"a {kind} argument given {v!r}")
    if str(kind) == "ScalarType":
        v = _constant(value)
        if isinstance(v, int):
            return _i64(v)
    if scalars and isinstance(kind, torch.NumberType):
        v = _constant(value)
        if isinstance(v, bool):
            return ir.BoolAttr.get(v)
        if isinstance(v, int):
            return _i64(v)
        if isinstance(v, float):
            return ir.FloatAttr.get(ir.F64Type.get(), v, loc=ir.Location.unknown())
    raise _NotEncodable(f"a {kind} argument")


def _why_not(op: ir.Operation, names, schema) -> str | None:
    if schema is None:
        return "PyTorch has no such operator" if names else "not an aten operator"
    if schema.is_mutable:
        return "it mutates its arguments"
    if len(schema.arguments) != len(op.operands) or len(schema.returns) != len(op.results):
        return "its operands do not match the operator's schema"
    bad = [str(r.type) for r in op.results if not _is_tensor(r)]
    if bad:
        return f"it returns {', '.join(bad)} (ATen calls return {', '.join(CALLABLE_DTYPES)} tensors)"
    return None


def to_aten_call(op: ir.Operation, scalars: bool = False) -> ir.Operation:
    """Replace `op` by an equivalent `tidal.aten_call`; raises _NotEncodable (op untouched) with
    the reason when the call cannot be expressed (`scalars`: see `_encode`)."""
    names = aten_name(op)
    schema = schema_of(*names) if names else None
    reason = _why_not(op, names, schema)
    if reason is not None:
        raise _NotEncodable(reason)
    tensors: list[ir.Value] = []
    args = [_encode(v, a.type, tensors, scalars) for v, a in zip(op.operands, schema.arguments)]
    with ir.InsertionPoint(op):
        call = build_aten_call(names[0], names[1], tensors, args, [r.type for r in op.results], loc=op.location)
    for old, new in zip(op.results, call.results):
        old.replace_all_uses_with(new)
    op.erase()
    return call


@tidal_pass(
    "tidal-aten-calls",
    "Turn library-kernel aten ops (and, with leftovers=1, every unlowered aten op) into tidal.aten_call",
    options=("leftovers",),
)
def aten_calls(module_op, leftovers: str = "0"):
    take_all = leftovers not in ("0", "false", "")
    found: list[ir.Operation] = []

    def visit(op):
        name = op.name
        if name in LIBRARY_KERNELS or name == OPERATOR or (take_all and name.startswith("torch.aten.")):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    for op in found:
        try:
            to_aten_call(op)
        except _NotEncodable as e:
            if op.name == OPERATOR:  # torch-mlir knows no lowering for it either: say why here
                name = ir.StringAttr(op.attributes["name"]).value
                raise TidalUnsupported(
                    f"'{name}' op has no lowering in torch-mlir and cannot run as an ATen call: {e}",
                    op.location,
                ) from None
            # otherwise torch-mlir lowers it, or tidal-check-torch-lowered reports it
