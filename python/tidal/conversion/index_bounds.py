"""`tidal-index-bounds`: an index out of range raises eager's error, never reads outside a tensor.

torch-mlir lowers the gathering ops to a `tensor.extract` at a loaded index: `index.Tensor` and
`index_select` check nothing (an index past the end read whatever memory lies there, silently),
while `gather` and `embedding` assert, and a failed `cf.assert` aborts the process. Eager checks
every index and raises. Before lowering, each such op gets:

  - a check (`tidal.passes.error_checks`): when any index is outside its dim (negative ones too,
    where the op does not wrap them), the same operator is called through ATen on the same
    operands: it raises eager's own error after the compiled function returns;
  - safe indices: an index outside its dim is replaced by 0, so the lowered gather never touches
    memory outside its tensor while the error is on its way (and on the GPU, which drops the
    check: eager CUDA reports a bad index with a device-side assert that poisons the context).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.conversion.aten_calls import to_aten_call
from tidal.dialects.types import TensorSpec, tensor_spec
from tidal.passes.error_checks import raise_if
from tidal.passes.registry import ops_named, tidal_pass

_INDEX_DTYPES = ("si64", "si32")  # (ui8 and i1 index tensors are masks)

# op -> (operand of the indexed tensor, how to find (index operand, dim) pairs, negatives wrap)
_INDEX_TENSOR = ("torch.aten.index.Tensor", "torch.aten.index.Tensor_hacked_twin")
_GATHERS = {
    "torch.aten.index_select": (0, 2, 1, False),  # (self, dim, index)
    "torch.aten.gather": (0, 2, 1, False),  # (self, dim, index, sparse_grad)
    "torch.aten.embedding": (0, 1, None, False),  # (weight, indices, ...): rows of weight
}


def _create(name: str, result_type: ir.Type, operands, attributes=None) -> ir.Value:
    return ir.Operation.create(name, results=[result_type], operands=list(operands), attributes=attributes).result


def _int(v: int) -> ir.Value:
    return _create("torch.constant.int", ir.Type.parse("!torch.int"), [],
                   {"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)})


def _constant_int(value: ir.Value) -> int | None:
    owner = value.owner if isinstance(value, ir.OpResult) else None
    if owner is not None and owner.operation.name == "torch.constant.int":
        return ir.IntegerAttr(owner.attributes["value"]).value
    return None


def _checked_indices(op: ir.Operation) -> list[tuple[int, ir.Value, ir.Value, bool]]:
    """(operand number, index tensor, indexed dim's size, negatives wrap) for each index of `op`."""
    name = op.name
    if name in _INDEX_TENSOR:
        source, indices = op.operands[0], op.operands[1]
        listed = indices.owner if isinstance(indices, ir.OpResult) else None
        if listed is None or listed.operation.name != "torch.prim.ListConstruct":
            return []
        return [(-1 - dim, index, _size(source, dim), True)
                for dim, index in enumerate(listed.operation.operands) if tensor_spec(index.type) is not None]
    source_at, index_at, dim_at, wraps = _GATHERS[name]
    dim = 0 if dim_at is None else _constant_int(op.operands[dim_at])
    if dim is None:
        return []
    source = op.operands[source_at]
    rank = tensor_spec(source.type).rank
    return [(index_at, op.operands[index_at], _size(source, dim % max(rank, 1)), wraps)]


def _size(source: ir.Value, dim: int) -> ir.Value:
    return _create("torch.aten.size.int", ir.Type.parse("!torch.int"), [source, _int(dim)])


def _bool_tensor(like: ir.Value) -> ir.Type:
    return TensorSpec(tensor_spec(like.type).shape, "i1", torch=True).to_type()


def _out_of_range(index: ir.Value, size: ir.Value, wraps: bool) -> ir.Value:
    flags = _bool_tensor(index)
    low = _create("torch.aten.neg.int", ir.Type.parse("!torch.int"), [size]) if wraps else _int(0)
    below = _create("torch.aten.lt.Scalar", flags, [index, low])
    above = _create("torch.aten.ge.Scalar", flags, [index, size])
    return _create("torch.aten.logical_or", flags, [below, above])


def _call_like_eager(op: ir.Operation) -> ir.Operation:
    """`op` as an ATen call on its original operands: with an index out of range, it raises eager's error."""
    call = to_aten_call(op.clone())
    if ir.StringAttr(call.attributes["overload"]).value == "Tensor_hacked_twin":  # a TorchScript-only name
        call.attributes["overload"] = ir.StringAttr.get("Tensor")
    return call


def _safe(index: ir.Value, bad: ir.Value) -> ir.Value:
    spec = tensor_spec(index.type)
    zero = _create("torch.prim.NumToTensor.Scalar", ir.Type.parse("!torch.vtensor<[],si64>"), [_int(0)])
    if spec.dtype != "si64":
        none = _create("torch.constant.none", ir.Type.parse("!torch.none"), [])
        false = _create("torch.constant.bool", ir.Type.parse("!torch.bool"), [], {"value": ir.BoolAttr.get(False)})
        code = {"si32": 3, "si16": 2, "si8": 1, "ui8": 0}[spec.dtype]
        zero = _create("torch.aten.to.dtype", TensorSpec((), spec.dtype, torch=True).to_type(), [zero, _int(code), false, false, none])
    return _create("torch.aten.where.self", index.type, [bad, zero, index])


def _guard(op: ir.Operation) -> None:
    indices = [(at, index, size, wraps) for at, index, size, wraps in _checked_indices(op)
               if tensor_spec(index.type).dtype in _INDEX_DTYPES]
    if not indices:
        return
    bads = [_out_of_range(index, size, wraps) for _, index, size, wraps in indices]
    scalar_flag = ir.Type.parse("!torch.vtensor<[],i1>")
    anys = [_create("torch.aten.any", scalar_flag, [bad]) if tensor_spec(bad.type).rank else bad for bad in bads]
    flag = anys[0]
    for other in anys[1:]:
        flag = _create("torch.aten.logical_or", scalar_flag, [flag, other])
    raise_if(_create("torch.aten.Bool.Tensor", ir.Type.parse("!torch.bool"), [flag]), lambda: _call_like_eager(op))
    safe = {at: _safe(index, bad) for (at, index, _, _), bad in zip(indices, bads)}
    if op.name in _INDEX_TENSOR:  # a new list: the old one may have other users
        listed = op.operands[1].owner.operation
        items = [safe.get(-1 - k, item) for k, item in enumerate(listed.operands)]
        op.operands[1] = _create("torch.prim.ListConstruct", listed.results[0].type, items)
    else:
        for at, value in safe.items():
            op.operands[at] = value


@tidal_pass(
    "tidal-index-bounds",
    "Gathering ops (index, index_select, gather, embedding) raise eager's error for an index out of range and never read outside their tensor",
)
def index_bounds(module_op):
    for op in ops_named(module_op, (*_INDEX_TENSOR, *_GATHERS)):
        with ir.InsertionPoint(op), op.location:
            _guard(op)
