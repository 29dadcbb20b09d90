"""`tidal-fold-scan-transposes`: a scan between transposes of its stacked values scans the
untransposed tensors along the dim the transposes moved.

PyTorch's `scan` and `associative_scan` move the scanned dim to the front
(`torch.movedim(x, dim, 0)`) and their results back: a recurrence over [B, T, D] along T reaches
tidal as `transpose → scan over dim 0 → transpose`, two full copies of every stacked tensor on
each side, strided ones (a linear recurrence on [4, 4096, 256], 1 thread: 47.5 ms, of which the
scan over dim 0 alone took 9.3). The CPU lowering scans any dim: step t's slice of [B, T, D]
along dim 1 is the [B, D] slice of the transposed [T, B, D] along dim 0, the remaining dims in the
same order. So when every stacked operand is a transpose that moves one dim `s` to the front
keeping the others' order, and every use of every stacked result is the transpose back, both
transposes go and the op scans dim `s`. Carries and the body are untouched.

CPU only: the GPU's persistent row kernel takes scans over dim 0.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass

# op name -> (index of the first stacked operand, stacked operands, stacked results)
_STACKED = {
    "tidal.associative_scan": lambda op, n, k: (0, list(op.operands)[:k], list(op.results)),
    "tidal.scan": lambda op, n, k: (n, list(op.operands)[n : n + k], list(op.results)[n:]),
}


def _producer(value: ir.Value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner


def _permutation(op) -> list[int] | None:
    if op is None or op.name != "linalg.transpose":
        return None
    return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))


def _to_front(s: int, rank: int) -> list[int]:
    """The permutation of `movedim(x, s, 0)`: result dim i reads input dim perm[i]."""
    return [s] + [d for d in range(rank) if d != s]


def _back_from_front(s: int, rank: int) -> list[int]:
    """The permutation of `movedim(y, 0, s)`."""
    rest = list(range(1, rank))
    return rest[:s] + [0] + rest[s:]


def _moved_type(t: ir.RankedTensorType, s: int) -> ir.RankedTensorType:
    """[T, rest...] as [rest[:s]..., T, rest[s:]...]."""
    shape = list(t.shape)
    shape = shape[1 : s + 1] + [shape[0]] + shape[s + 1 :]
    return ir.RankedTensorType.get(shape, t.element_type, t.encoding)


def _fold(op) -> bool:
    attr = lambda name: ir.IntegerAttr(op.attributes[name]).value  # noqa: E731
    n = attr("num_carries") if op.name == "tidal.scan" else 0
    k, dim = attr("num_xs"), attr("dim")
    first, operands, results = _STACKED[op.name](op, n, k)
    if not operands or dim != 0:
        return False
    rank = ir.RankedTensorType(operands[0].type).rank
    perm = _permutation(_producer(operands[0]))
    if perm is None or perm[0] == 0 or perm != _to_front(perm[0], rank):
        return False
    s = perm[0]
    if any(_permutation(_producer(v)) != perm for v in operands):
        return False
    back = _back_from_front(s, rank)
    if any(_permutation(use.owner) != back for r in results for use in r.uses):
        return False
    producers = []
    for i, v in enumerate(operands):
        transpose = _producer(v)
        op.operands[first + i] = transpose.operands[0]
        if not any(transpose == p for p in producers):
            producers.append(transpose)
    for r in results:
        with op.location:
            r.set_type(_moved_type(ir.RankedTensorType(r.type), s))
        for use in list(r.uses):
            transpose = use.owner
            transpose.results[0].replace_all_uses_with(r)
            transpose.erase()
    for transpose in producers:
        if not list(transpose.results[0].uses):
            transpose.erase()
    with op.location:
        op.attributes["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), s)
    return True


@tidal_pass("tidal-fold-scan-transposes", "Scan the untransposed tensors where transposes move the scanned dim to the front and back")
def fold_scan_transposes(module_op):
    for op in ops_named(module_op, _STACKED):
        _fold(op)
