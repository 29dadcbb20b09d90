"""`tidal-fold-reversals`: a scan between flips of its stacked values is a reverse scan.

PyTorch's `reverse=True` front ends and tidal's own adjoints (the reverse scans of
`tidal.autodiff`) reach the scan ops as `flip(xs) → scan → flip(ys)` along the scanned dim: two
full copies of every stacked tensor on each side. A scan walks its steps from either end at the
same cost, so when every stacked operand is such a flip and every use of every stacked result is
one, the flips go and the op's `reverse` flag toggles. Step t of the reverse scan reads x_t and
writes y_t, and its accumulated (later) values are the combine's lhs: what the flipped forward
scan computed.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass

# op name -> (stacked operands, stacked results) of a scan op
_STACKED = {
    "tidal.associative_scan": lambda op, n, k: (list(op.operands)[:k], list(op.results)),
    "tidal.scan": lambda op, n, k: (list(op.operands)[n : n + k], list(op.results)[n:]),
}


def _producer(value: ir.Value):
    """The op defining `value`, None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner


def _is_flip_along(op, dim: int, rank: int) -> bool:
    """`op` is `torch.aten.flip` of exactly the (constant) dim `dim`."""
    if op is None or op.name != "torch.aten.flip":
        return False
    dims = _producer(op.operands[1])
    if dims is None or dims.name != "torch.prim.ListConstruct" or len(dims.operands) != 1:
        return False
    const = _producer(dims.operands[0])
    if const is None or const.name != "torch.constant.int":
        return False
    return ir.IntegerAttr(const.attributes["value"]).value % rank == dim


def _rank(value: ir.Value) -> int:
    shape = str(value.type).split("<[", 1)[1].split("]", 1)[0]  # !torch.vtensor<[a,b],f32>
    return 0 if shape == "" else shape.count(",") + 1


def _fold(op) -> bool:
    attr = lambda name: ir.IntegerAttr(op.attributes[name]).value  # noqa: E731
    n = attr("num_carries") if op.name == "tidal.scan" else 0
    k, dim = attr("num_xs"), attr("dim")
    operands, results = _STACKED[op.name](op, n, k)
    if not operands:
        return False
    rank = _rank(operands[0])
    if not all(_is_flip_along(_producer(v), dim, rank) for v in operands):
        return False
    if not all(_is_flip_along(use.owner, dim, rank) for r in results for use in r.uses):
        return False
    first = n if op.name == "tidal.scan" else 0
    for i, v in enumerate(operands):
        op.operands[first + i] = v.owner.operands[0]
    for r in results:
        for use in list(r.uses):
            flip = use.owner
            flip.results[0].replace_all_uses_with(r)
            flip.erase()
    producers = []
    for v in operands:
        if not any(v.owner == p for p in producers):
            producers.append(v.owner)
    for flip in producers:
        if not list(flip.results[0].uses):
            flip.erase()
    reverse = ir.BoolAttr(op.attributes["reverse"]).value
    op.attributes["reverse"] = ir.BoolAttr.get(not reverse)
    return True


@tidal_pass("tidal-fold-reversals", "Fold flip → scan → flip along the scanned dim into the scan's reverse flag")
def fold_reversals(module_op):
    for op in ops_named(module_op, _STACKED):
        _fold(op)
