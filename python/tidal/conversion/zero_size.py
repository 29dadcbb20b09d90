"""`tidal-empty-tensors`: a view or concatenation with a static 0 dim makes an empty tensor.

torch-mlir's `aten.view` lowering (ConvertAtenViewOp in convert-torch-to-linalg) matches the
input's dims to the output's by dividing static element counts: the ratio of the two products
(their gcd is 0 when both are 0) and the size of a single dynamic dim (the known dims' product
is 0). With a static 0 among the dims of either side, both are integer divisions by zero: SIGFPE
inside the compiler, which kills the user's process before tidal's eager fallback can act. Every
view of an empty tensor reaches it: `squeeze`, `flatten`, `reshape`, `unflatten`, a `view(-1)`,
under static and dynamic shapes, in loop bodies and gradients too. Where it does not divide (a
dynamic dim collapsed with a static 0), its collapse into a static 0 fails memref's verifier.
`aten.cat` of operands that are all empty along the dim loses them all to torch's canonicalizer
and to the lowering, and a `tensor.concat` of nothing fails its verifier; one empty along another
dim (a split's gradient) leaves insert_slices at offset 0 of a 0-size dim, which the verifier
calls out of bounds.

None of them moves any data: each such op becomes `aten.empty.memory_format` of its sizes (a
view's own list, an inferred `-1` being 0 there, as eager infers it only when the other sizes
are nonzero; a concatenation's from its operands). Runs at the start of the torch-level
simplification (before the canonicalizer drops a concatenation's operands) and again right
before torch-mlir's conversions (decompositions make views).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.extras.fx_importer import TORCH_DTYPE_TO_INT, TORCH_DTYPE_TO_MLIR_TYPE_ASM

from tidal.conversion.index_bounds import _constant_int, _create, _int
from tidal.diagnostics import TidalUnsupported
from tidal.dialects.types import tensor_spec
from tidal.passes.registry import ops_named, tidal_pass

_VIEWS = ("torch.aten.view", "torch.aten._unsafe_view", "torch.aten.reshape")
_SCALAR_TYPE = {asm: TORCH_DTYPE_TO_INT[dt] for dt, asm in TORCH_DTYPE_TO_MLIR_TYPE_ASM.items()
                if dt in TORCH_DTYPE_TO_INT}


def _has_zero_dim(value: ir.Value) -> bool:
    spec = tensor_spec(value.type)
    return spec is not None and 0 in spec.shape


def _listed(value: ir.Value) -> list[ir.Value] | None:
    owner = value.owner if isinstance(value, ir.OpResult) else None
    if owner is None or owner.operation.name != "torch.prim.ListConstruct":
        return None
    return list(owner.operation.operands)


def _replace_by_empty(op: ir.Operation, dims: list[ir.Value | int]) -> None:
    """Replace `op`'s result by an empty tensor of its type, of sizes `dims` (ints or !torch.int)."""
    result = op.results[0]
    dtype = tensor_spec(result.type).dtype
    if dtype not in _SCALAR_TYPE:
        raise TidalUnsupported(f"'{op.name}' op makes an empty tensor of {dtype}, which tidal cannot create",
                               op.location)
    with ir.InsertionPoint(op), op.location:
        sizes = _create("torch.prim.ListConstruct", ir.Type.parse("!torch.list<int>"),
                        [_int(d) if isinstance(d, int) else d for d in dims])
        none = _create("torch.constant.none", ir.Type.parse("!torch.none"), [])
        empty = _create("torch.aten.empty.memory_format", result.type,
                        [sizes, _int(_SCALAR_TYPE[dtype]), none, none, none, none])
    result.replace_all_uses_with(empty)
    op.erase()


def _empty_view(op: ir.Operation) -> None:
    sizes = _listed(op.operands[1])
    if sizes is None:
        return  # the lowering gives up on such a list before it divides
    shape = tensor_spec(op.results[0].type).shape
    _replace_by_empty(op, [static if static is not None else 0 if _constant_int(size) == -1 else size
                           for static, size in zip(shape, sizes)])


def _empty_cat(op: ir.Operation) -> None:
    tensors, dim = _listed(op.operands[0]), _constant_int(op.operands[1])
    shape = tensor_spec(op.results[0].type).shape
    # operands of the result's rank (a 1-D [0] operand may stand beside them, adding nothing)
    full = [t for t in tensors or [] if len(tensor_spec(t.type).shape) == len(shape)]
    if not full or dim is None:
        return
    dim %= len(shape)
    dims = []
    with ir.InsertionPoint(op), op.location:
        for i, static in enumerate(shape):
            if static is not None:
                dims.append(static)
                continue
            # the concatenated dim sums the operands' sizes; another is the first operand's
            summed = full if i == dim else full[:1]
            sizes = [_create("torch.aten.size.int", ir.Type.parse("!torch.int"), [t, _int(i)]) for t in summed]
            total = sizes[0]
            for size in sizes[1:]:
                total = _create("torch.aten.add.int", ir.Type.parse("!torch.int"), [total, size])
            dims.append(total)
    _replace_by_empty(op, dims)


@tidal_pass(
    "tidal-empty-tensors",
    "A view or concatenation with a static 0 dim becomes an empty tensor of its sizes (torch-mlir divides by 0 or "
    "concatenates nothing)",
)
def empty_tensors(module_op):
    for op in ops_named(module_op, _VIEWS):
        if _has_zero_dim(op.operands[0]) or _has_zero_dim(op.results[0]):
            _empty_view(op)
    for op in ops_named(module_op, ("torch.aten.cat",)):
        if _has_zero_dim(op.results[0]):
            _empty_cat(op)
