"""float16/bfloat16 arithmetic computed in float32, rounded once per op, as eager does (an FX pass
before import).

Eager PyTorch computes a reduced-precision op in its "opmath" type, float32: a bfloat16 sum
accumulates in float32 and rounds the result once, a bfloat16 `tanh` is `tanhf` rounded. The
linalg that torch-mlir makes of the same aten ops computes in the tensors' own type: a bfloat16
sum of 4096 values in [0, 1) came out 256 where eager says 2064 (the accumulator stops growing once
an addend is under half its last place). So every aten op that rounds gets its float16/bfloat16
operands converted to float32 (and a float16/bfloat16 `dtype` argument made float32), and each of
its reduced-precision results converted back: the same roundings as eager, op for op.

Ops that only move or compare values (views, indexing, concatenation, max/min, comparisons,
`where`, conversions) round nothing, and keep their types. The control-flow HOPs are not aten ops:
their bodies are graphs of their own, rewritten the same way.
"""

from __future__ import annotations

import operator

import torch

from tidal.importer.fx_rewrite import rewrite_nodes

aten = torch.ops.aten
REDUCED = (torch.float16, torch.bfloat16)

# aten ops whose results are exactly representable in their operands' type (no rounding):
# computing them in float32 would give the same values at the cost of conversions
_EXACT = {
    # conversions and copies
    "_to_copy", "to", "clone", "copy", "copy_", "lift_fresh_copy", "detach", "alias", "contiguous",
    # views and reshapes
    "view", "_unsafe_view", "reshape", "expand", "expand_as", "permute", "transpose", "t", "squeeze",
    "unsqueeze", "slice", "select", "as_strided", "unfold", "split", "split_with_sizes", "unbind", "chunk",
    "narrow", "movedim", "diagonal", "view_as", "flatten", "unflatten",
    # gathers and scatters (an accumulating index_put or scatter adds one value at a time in the
    # narrow type, as eager's does)
    "index", "_unsafe_index", "index_select", "gather", "embedding", "take", "index_put", "_unsafe_index_put",
    "scatter", "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "masked_select",
    # arrangement
    "cat", "stack", "flip", "roll", "repeat", "tile", "constant_pad_nd", "where", "masked_fill", "tril", "triu",
    # order and comparisons
    "max", "min", "amax", "amin", "maximum", "minimum", "argmax", "argmin", "sort", "topk", "eq", "ne", "lt",
    "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "sign",
    # sign and magnitude
    "relu", "neg", "abs",
    # tensors made without arithmetic
    "zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones", "new_empty", "new_full",
    "empty", "zeros", "ones", "full", "scalar_tensor", "empty_strided", "arange",
    # sizes
    "sym_size", "sym_numel", "sym_stride",
}


def compute_reduced_precision_in_float32(gm: torch.fx.GraphModule) -> None:
    """Rewrite `gm` (and the HOP bodies inside it) in place; see the module docstring."""
    rewrite_nodes(gm, _compute_in_float32)


def _val(a):
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else None


def _is_reduced(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dtype in REDUCED


def _rounds_in_reduced_precision(node: torch.fx.Node) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return False
    if target.__name__.split(".")[0] in _EXACT:
        return False
    inputs = [_val(a) for a in node.all_input_nodes]
    outputs = node.meta.get("val")
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    return any(_is_reduced(v) for v in inputs + outputs)


def _widened(v):
    return v.to(torch.float32) if _is_reduced(v) else v


def _convert(graph: torch.fx.Graph, value: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    converted = graph.call_function(aten._to_copy.default, (value,), {"dtype": dtype})
    converted.meta = {k: v for k, v in value.meta.items() if k not in ("val", "tensor_meta")}
    converted.meta["val"] = value.meta["val"].to(dtype)
    return converted


def _compute_in_float32(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """`node` on float32 operands, its reduced-precision results rounded back to their types,
    if it rounds in reduced precision."""
    if not _rounds_in_reduced_precision(node):
        return False
    with graph.inserting_before(node):
        wide = {a: _convert(graph, a, torch.float32) for a in node.all_input_nodes if _is_reduced(_val(a))}

    def widen(a):
        if isinstance(a, torch.fx.Node):
            return wide.get(a, a)
        if isinstance(a, torch.dtype) and a in REDUCED:  # sum(x, dtype=bfloat16): accumulate in float32
            return torch.float32
        if isinstance(a, (list, tuple)):
            return type(a)(widen(x) for x in a)
        return a

    node.args = tuple(widen(a) for a in node.args)
    node.kwargs = {k: widen(v) for k, v in node.kwargs.items()}
    _forget_tensor_meta(node)
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):  # several results: each goes through a getitem
        node.meta["val"] = type(val)(_widened(v) for v in val)
        for user in list(node.users):
            if user.target is operator.getitem and _is_reduced(user.meta.get("val")):
                narrow_type = user.meta["val"].dtype
                user.meta["val"] = _widened(user.meta["val"])
                _forget_tensor_meta(user)
                _round_back(graph, user, narrow_type)
    elif _is_reduced(val):
        narrow_type = val.dtype
        node.meta["val"] = _widened(val)
        _round_back(graph, node, narrow_type)
    return True


def _forget_tensor_meta(node: torch.fx.Node) -> None:
    """The importer types a node by its `tensor_meta` before its `val`: drop the stale one."""
    node.meta.pop("tensor_meta", None)


def _round_back(graph: torch.fx.Graph, value: torch.fx.Node, dtype: torch.dtype) -> None:
    users = list(value.users)
    with graph.inserting_after(value):
        narrow = _convert(graph, value, dtype)
    for user in users:
        user.replace_input_with(value, narrow)
