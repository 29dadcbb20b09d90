"""`tidal-negative-pads`: a `constant_pad_nd` that removes elements is a slice, then a pad.

Eager's `constant_pad_nd` (`F.pad(mode="constant")`) takes negative amounts: a negative one
removes that many elements from its end of the dim (`F.pad(x, [1, -1])` shifts the last dim right
by one). The backward of every positive pad is such a negative pad. torch-mlir's lowering
(ConvertAtenConstantPadNdOp in convert-torch-to-linalg) hands the amounts to `tensor.pad` as they
are, and `tensor.pad` is only defined for non-negative ones:

  - `[1, -1]` on a static dim gives a `tensor.pad` whose result type is its source's, and
    `tensor.pad`'s folder returns the source for that: the input, unshifted, a silent wrong answer;
  - a negative low amount fails a `memref.subview` verifier ("expected offsets to be
    non-negative"), a negative high one runs it out of bounds, after bufferization;
  - a symbolic amount (a SymInt: `F.pad(x, [0, n - x.shape[-1]])`) reaches it as a runtime value,
    and a negative one at run time gives a wrong answer too.

So, before torch-mlir's conversions, every such op becomes `aten.slice.Tensor` along each dim that
loses elements (start = the low amount removed, end = size - the high amount removed), then a
`constant_pad_nd` of the non-negative amounts. A symbolic amount `p` is split at run time:
removed = max(-p, 0), padded = max(p, 0), so any sign is right. Amounts that are constants >= 0,
or already such a max, are left as they are (the pass can run again).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.conversion.index_bounds import _constant_int, _create, _int
from tidal.diagnostics import TidalUnsupported
from tidal.dialects.types import TensorSpec, tensor_spec
from tidal.passes.registry import ops_named, tidal_pass

_PAD = "torch.aten.constant_pad_nd"


def _int_type() -> ir.Type:
    return ir.Type.parse("!torch.int")


def _listed(value: ir.Value) -> list[ir.Value] | None:
    owner = value.owner if isinstance(value, ir.OpResult) else None
    if owner is None or owner.operation.name != "torch.prim.ListConstruct":
        return None
    return list(owner.operation.operands)


def _known_nonnegative(value: ir.Value) -> bool:
    """A constant >= 0, a size, or max(·, c) with a constant c >= 0 (what this pass makes)."""
    c = _constant_int(value)
    if c is not None:
        return c >= 0
    owner = value.owner if isinstance(value, ir.OpResult) else None
    if owner is None:
        return False
    name = owner.operation.name
    if name == "torch.aten.size.int":
        return True
    if name == "torch.prim.max.int":
        return any(c is not None and c >= 0 for c in map(_constant_int, owner.operation.operands))
    return False


def _split(amount: ir.Value) -> tuple[int | ir.Value, int | ir.Value]:
    """(elements removed, elements added) for one pad amount: ints where it is a constant."""
    c = _constant_int(amount)
    if c is not None:
        return max(-c, 0), max(c, 0)
    if _known_nonnegative(amount):
        return 0, amount
    zero = _int(0)
    removed = _create("torch.prim.max.int", _int_type(), [_create("torch.aten.neg.int", _int_type(), [amount]), zero])
    added = _create("torch.prim.max.int", _int_type(), [amount, zero])
    return removed, added


def _as_value(v: int | ir.Value) -> ir.Value:
    return _int(v) if isinstance(v, int) else v


def _narrow(x: ir.Value, dim: int, removed_low, removed_high, location) -> ir.Value:
    """`x[..., removed_low : size - removed_high, ...]` along `dim`."""
    spec = tensor_spec(x.type)
    size = spec.shape[dim]
    static = isinstance(removed_low, int) and isinstance(removed_high, int)
    if size is not None and static and size - removed_low - removed_high < 0:
        raise TidalUnsupported(
            f"'{_PAD}' op removes {removed_low + removed_high} elements from dim {dim} of size {size} "
            "(negative padding larger than the dim)", location)
    if size is not None and isinstance(removed_high, int):
        end = _int(size - removed_high)
    else:
        size_value = _int(size) if size is not None else _create("torch.aten.size.int", _int_type(), [x, _int(dim)])
        end = size_value if removed_high == 0 else _create("torch.aten.sub.int", _int_type(), [size_value, _as_value(removed_high)])
    new_size = size - removed_low - removed_high if size is not None and static else None
    shape = spec.shape[:dim] + (new_size,) + spec.shape[dim + 1:]
    return _create("torch.aten.slice.Tensor", TensorSpec(shape, spec.dtype, torch=True).to_type(),
                   [x, _int(dim), _as_value(removed_low), end, _int(1)])


def _rewrite(op: ir.Operation) -> None:
    x, pad_list, fill = list(op.operands)[:3]
    amounts = _listed(pad_list)
    spec = tensor_spec(x.type)
    if amounts is None or spec is None or all(_known_nonnegative(a) for a in amounts):
        return
    if len(amounts) % 2 or len(amounts) // 2 > spec.rank:
        return  # torch-mlir refuses it with its own message
    result_type = op.results[0].type
    with ir.InsertionPoint(op), op.location:
        added = []
        narrowed = x
        for i in range(len(amounts) // 2):  # pairs (low, high), from the last dim back
            dim = spec.rank - 1 - i
            removed_low, added_low = _split(amounts[2 * i])
            removed_high, added_high = _split(amounts[2 * i + 1])
            added += [added_low, added_high]
            if removed_low != 0 or removed_high != 0:
                narrowed = _narrow(narrowed, dim, removed_low, removed_high, op.location)
        if all(a == 0 for a in added if isinstance(a, int)) and all(isinstance(a, int) for a in added) \
                and narrowed.type == result_type:
            value = narrowed
        else:
            new_list = _create("torch.prim.ListConstruct", pad_list.type, [_as_value(a) for a in added])
            value = _create(_PAD, result_type, [narrowed, new_list, fill])
    op.results[0].replace_all_uses_with(value)
    op.erase()


@tidal_pass(
    "tidal-negative-pads",
    "constant_pad_nd with negative (or symbolic) amounts becomes a slice of the removed elements, then a pad of the "
    "added ones (torch-mlir's tensor.pad takes negative amounts silently wrong)",
)
def negative_pads(module_op):
    for op in ops_named(module_op, (_PAD,)):
        _rewrite(op)
