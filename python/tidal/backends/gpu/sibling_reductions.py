"""`tidal-fuse-sibling-reductions`: reductions over the same operand become ONE generic with one
out per reduction (GPU backend).

`x.isnan().any() | x.isinf().any()`, `x.sum()` and `x.amax()`, a mean and a variance: after
elementwise fusion each is a reduction generic reading `x`, and each would be a kernel reading all
of `x` again. A reduction is bandwidth-bound, so two of them over one operand cost twice what one
kernel computing both does. Two split reductions (every out folded by one combiner, `kernels.py`)
merge when they run over the same iteration space (same iterator types and one common input read
through a map covering every loop dim, so the sizes agree) and either the later one reads nothing
defined between them (the merged op takes the earlier one's place) or nothing between them uses
the earlier one's results (it takes the later one's place). The merged body is both
bodies side by side; its inputs are the union of theirs.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import linalg

from tidal.backends.gpu.kernels import defined_inside, split_combiners
from tidal.passes.registry import ops_named, tidal_pass


def _maps(op) -> list:
    return [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]


def _full_reads(op) -> list:
    """(operand, map text) of the inputs whose map reads every loop dim (they fix every loop size)."""
    rank = len(op.attributes["iterator_types"])
    reads = []
    for v, m in zip(op.opview.inputs, _maps(op)):
        dims = {e.maybe_downcast().position for e in m.results if isinstance(e.maybe_downcast(), ir.AffineDimExpr)}
        if len(dims) == rank:
            reads.append((v, str(m)))
    return reads


def _same_space(a, b) -> bool:
    """Same iterator types and a common input read through a map covering every loop dim."""
    if str(a.attributes["iterator_types"]) != str(b.attributes["iterator_types"]):
        return False
    return any(v == u and m == n for v, m in _full_reads(a) for u, n in _full_reads(b))


def _reads_only_before(second, first) -> bool:
    """Every value `second` reads (operands, and values from above its body) dominates `first`:
    the merged op can stand at `first`'s place."""
    values = list(second.operands)
    for inner in second.regions[0].blocks[0].operations:
        values += [v for v in inner.operands if not defined_inside(v, second)]
    for v in values:
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.operation.block != first.block:
            continue  # an argument, or defined around this block
        if not owner.operation.is_before_in_block(first):
            return False
    return True


def _used_only_after(first, second) -> bool:
    """Every use of `first`'s results comes after `second` (the merged op can stand at `second`'s
    place: what `first` reads dominates it already)."""
    for r in first.results:
        for use in r.uses:
            user = use.owner.operation
            while user.block != second.block:
                user = user.parent.operation
            if not second.is_before_in_block(user):
                return False
    return True


def _merge(first, second, at):
    """One generic at `at`'s place (`first` or `second`) computing both: inputs deduplicated,
    outs concatenated."""
    g1, g2 = first.opview, second.opview
    ins, in_maps = [], []
    for v, m in [*zip(g1.inputs, _maps(first)), *zip(g2.inputs, _maps(second))]:
        if not any(v == u and str(m) == str(n) for u, n in zip(ins, in_maps)):
            ins.append(v)
            in_maps.append(m)
    outs = [*g1.outputs, *g2.outputs]
    out_maps = _maps(first)[len(g1.inputs):] + _maps(second)[len(g2.inputs):]
    with ir.InsertionPoint(at), first.location:
        fused = linalg.GenericOp(
            [r.type for r in [*first.results, *second.results]], ins, outs,
            ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in [*in_maps, *out_maps]]), first.attributes["iterator_types"],
        )
        block = fused.regions[0].blocks.append(*[ir.RankedTensorType(v.type).element_type for v in [*ins, *outs]])
    yielded, out_base = [], len(ins)
    for old in (first, second):
        g, body = old.opview, old.regions[0].blocks[0]
        for arg, (v, m) in zip(body.arguments, zip(g.inputs, _maps(old))):
            k = next(i for i, (u, n) in enumerate(zip(ins, in_maps)) if u == v and str(n) == str(m))
            arg.replace_all_uses_with(block.arguments[k])
        for j in range(len(g.outputs)):
            body.arguments[len(g.inputs) + j].replace_all_uses_with(block.arguments[out_base + j])
        out_base += len(g.outputs)
        *ops, terminator = list(body.operations)
        yielded += [(ops, list(terminator.operands))]
    with ir.InsertionPoint(block), first.location:
        end = linalg.YieldOp([v for _, values in yielded for v in values])
    for ops, _ in yielded:
        for inner in ops:
            inner.operation.move_before(end)
    for r, v in zip([*first.results, *second.results], fused.results):
        r.replace_all_uses_with(v)
    second.erase()
    first.erase()
    return fused.operation


@tidal_pass("tidal-fuse-sibling-reductions", "Merge split reductions over one operand into one generic (GPU)")
def fuse_sibling_reductions(module_op):
    merged: list = []  # reductions kept so far (merged ones included), in program order
    for op in ops_named(module_op, ("linalg.generic",)):
        if split_combiners(op) is None:
            continue
        op = op.operation
        k = next((k for k, m in enumerate(merged) if m.block == op.block and _same_space(m, op)
                  and (_reads_only_before(op, m) or _used_only_after(m, op))), None)
        if k is None:
            merged.append(op)
        else:
            merged[k] = _merge(merged[k], op, merged[k] if _reads_only_before(op, merged[k]) else op)
