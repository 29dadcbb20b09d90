"""`tidal.associative_scan` → a sequential running combine in an `scf.for`, and for long scans a
blocked scan whose blocks run in parallel (`scf.forall`, on threads after `tidal-forall-to-threads`),
chosen at run time from the target's parallel width (`tidal.parallelism`, which each backend lowers).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, scf

from tidal.conversion import scf_builders as b
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF
from tidal.dialects.parallelism import build_parallelism
from tidal.passes.registry import values_read

# Below this many steps a blocked scan cannot pay for starting the thread team (a few µs) and
# for scanning most blocks twice; the lowering then emits the sequential loop alone.
PARALLEL_MIN_STEPS = 8192

# Ops that make a combine compute-bound. A combine of elementwise arithmetic alone runs, once
# vectorized, at memory bandwidth on one core (linear recurrence, 16 channels, T=131072: 0.86 ms
# sequential, 1.71 ms blocked on 2 threads), and the blocked form moves 4/3 of the bytes; a
# contraction or a transcendental function leaves bandwidth to spare (2x2 matrix product: 1.41 ms
# sequential, 1.03 ms blocked; logaddexp: 12.1 ms, 10.4 ms).
_TRANSCENDENTAL = {"exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "tanh", "sin", "cos", "tan",
                   "erf", "erfc", "atan", "atan2", "powf", "fpowi", "sinh", "cosh", "asin", "acos", "cbrt"}


def _compute_bound(body: ir.Block) -> bool:
    """Whether the combine does more than elementwise arithmetic (see `_TRANSCENDENTAL`)."""
    found = []

    def visit(op):
        dialect, _, name = op.name.partition(".")
        if op.name == "linalg.generic":
            if any("reduction" in str(t) for t in op.attributes["iterator_types"]):
                found.append(op)
        elif dialect == "linalg" and name not in ("yield", "index", "fill"):
            found.append(op)  # a named structured op: a contraction, a reduction, a convolution
        elif (dialect == "math" and name in _TRANSCENDENTAL) or op.name == "tidal.aten_call":
            found.append(op)
        return ir.WalkResult.ADVANCE

    for op in body.operations:
        op.operation.walk(visit)
    return bool(found)


@LOWER_TO_SCF.rule("tidal.associative_scan")
def lower_associative_scan_to_scf(op):
    """A sequential running combine: out[first] = x[first], then out[t] = combine(out[t-1], x[t])
    for each later t (in scan order). One pass, O(T) work.

    The loop carries only the results: the previous prefix is read back from them, so once
    `eliminate-empty-tensors` lets the combine write its slice of the result in place (the slices
    at t-1 and t are provably disjoint), a step allocates and copies nothing.

    A scan that may reach `PARALLEL_MIN_STEPS` steps with a compute-bound combine also gets the
    blocked form (reduce, then scan), taken at run time when more than one thread is allowed: see
    `_blocked_scan`."""
    k, dim, reverse = (op.attributes[a].value for a in ("num_xs", "dim", "reverse"))
    operands = list(op.operands)
    xs, consts = operands[:k], operands[k:]
    body = op.regions[0].blocks[0]
    scan = _Scan(body, consts, [a.type for a in list(body.arguments)[:k]], dim, reverse)
    t = xs[0].type
    may_be_long = t.is_dynamic_dim(dim) or t.get_dim_size(dim) >= PARALLEL_MIN_STEPS
    may_block = may_be_long and _compute_bound(body)
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], dim)
        outs = [b.empty_like_stacked(x.type, length, dim, f"'{op.name}' result", op.location,
                                     lambda d, x=x: b.dim_size(x, d)) for x in xs]
        if not may_block:
            results = scan.rows(xs, outs, None, consume_body=True, needed=_needed_results(op, body, k))
        else:
            threads = build_parallelism().result
            parallel = arith.AndIOp(
                arith.CmpIOp(arith.CmpIPredicate.sge, threads, b.index(2)).result,
                arith.CmpIOp(arith.CmpIPredicate.sge, length, b.index(PARALLEL_MIN_STEPS)).result,
            ).result
            choice = scf.IfOp(parallel, [o.type for o in outs], has_else=True)
            with ir.InsertionPoint(choice.then_block):
                scf.YieldOp(_blocked_scan(scan, xs, outs, length, threads))
            with ir.InsertionPoint(choice.else_block):
                scf.YieldOp(scan.rows(xs, outs, None))
            results = list(choice.results)
    b.replace_op(op, results)


def _needed_results(op, body: ir.Block, k: int) -> list[bool]:
    """Which results the sequential loop must compute: those used after the scan, and those whose
    running prefix feeds them. Only the sequential form may drop the others: there the combine's
    rhs is always one element, while in a blocked or tree form it is a partial prefix of every
    operand (the running product of a linear recurrence's `a`, needed by its `b` there, is dead
    here, and a differentiated recurrence's forward and adjoint both have one)."""
    args = list(body.arguments)
    reaches: dict = {arg: {i} for i, arg in enumerate(args[:k])}

    def lhs_of(v) -> set[int]:
        return reaches.get(v, set())

    for inner in body.operations:
        deps = set().union(*(lhs_of(v) for v in values_read(inner.operation)))
        for r in inner.results:
            reaches[r] = deps
    yielded = list(body.operations)[-1].operands
    needed = {j for j in range(k) if len(list(op.results[j].uses))}
    while True:
        more = set().union(*(lhs_of(yielded[j]) for j in needed)) - needed
        if not more:
            return [j in needed for j in range(k)]
        needed |= more


class _Scan:
    """The pieces of a scan in scan order (`reverse` walks positions from the end), each built
    from a copy of the combine body where it is needed."""

    def __init__(self, body: ir.Block, consts, slice_types, dim: int, reverse: bool):
        self.body, self.consts, self.slice_types, self.dim, self.reverse = body, consts, slice_types, dim, reverse

    def combine(self, lhs, rhs, anchor, consume_body=False):
        args = list(lhs) + list(rhs) + self.consts
        if consume_body:
            return b.inline_body(self.body, args, anchor)
        return b.clone_body(self.body, args, anchor)

    def step(self, values, at):
        return [b.extract_step(v, self.dim, at, st) for v, st in zip(values, self.slice_types)]

    def rows(self, xs, outs, carry, consume_body=False, needed=None):
        """`outs` (shaped like `xs`) filled with the inclusive scan of `xs`, entered with
        `carry` (None: the first element starts it). Needs at least one position.

        `needed` (None: all) says which results to compute; the others are left unwritten, their
        combine's lhs given the step's element (their computation is then dead code)."""
        dim, reverse = self.dim, self.reverse
        live = [j for j in range(len(xs)) if needed is None or needed[j]]
        length = b.dim_size(xs[0], dim)
        first = b.step_index(b.index(0), length, reverse)
        start = self.step(xs, first)
        if carry is not None:
            anchor = ir.Operation.create("tidal.lowering_anchor")
            start = self.combine(carry, start, anchor)
            anchor.erase()
        loop = scf.ForOp(b.index(1), length, b.index(1), [b.insert_step(start[j], outs[j], dim, first) for j in live])
        iv, acc_outs = loop.induction_variable, list(loop.inner_iter_args)
        anchor = b.anchor_at_end(loop.body)
        with ir.InsertionPoint(anchor):
            t = b.step_index(iv, length, reverse)
            prev = b.step_index(arith.SubIOp(iv, b.index(1)).result, length, reverse)
            prefixes = [b.extract_step(out, dim, prev, self.slice_types[j]) for j, out in zip(live, acc_outs)]
            x_t = self.step(xs, t)
            acc = list(x_t)
            for j, a in zip(live, prefixes):
                acc[j] = a
        combined = self.combine(acc, x_t, anchor, consume_body)
        with ir.InsertionPoint(anchor):
            scf.YieldOp([b.insert_step(combined[j], out, dim, t) for j, out in zip(live, acc_outs)])
        anchor.erase()
        results = list(outs)
        for j, r in zip(live, loop.results):
            results[j] = r
        return results


def _forall(count: ir.Value, lower: int, shared: list[ir.Value]):
    """`scf.forall (%j) = (lower) to (count)` over `shared` tensors; returns (op, j, shared args)."""
    op = scf.ForallOp([lower], [count], [1], shared)
    return op, op.induction_variables[0], list(op.inner_iter_args), op.body


def _in_parallel(block: ir.Block):
    with ir.InsertionPoint(block):
        term = scf.InParallelOp()
    return term.region.blocks[0] if len(term.region.blocks) else term.region.blocks.append()


def _blocked_scan(scan: _Scan, xs, outs, length, threads):
    """Reduce-then-scan over `threads` + 1 blocks of scan positions, on `threads` threads:

    1. in parallel: blocks 0..nb-2 are each scanned on their own into the result (block 0 is
       then final; the others' last rows are their totals, and are scanned again in 3.; a scan
       writes in place where a fold would carry its accumulator through fresh buffers);
    2. the carry entering each block: a short sequential scan of the totals;
    3. in parallel: each block j in 1..nb-1 is scanned into the result from its carry.

    Two passes of T/(threads+1) steps each instead of one of T: (threads+1)/2 faster when the
    combine, not memory, is the cost. The combine is associative, so only rounding differs from
    the sequential order."""
    dim, reverse = scan.dim, scan.reverse
    size = arith.CeilDivSIOp(length, arith.AddIOp(threads, b.index(1)).result).result
    blocks = arith.CeilDivSIOp(length, size).result

    def block_range(j):
        """(first row, row count) in memory of block j (blocks numbered in scan order)."""
        lo = arith.MulIOp(j, size).result
        hi = arith.MinSIOp(arith.AddIOp(lo, size).result, length).result
        count = arith.SubIOp(hi, lo).result
        return (arith.SubIOp(length, hi).result if reverse else lo), count

    # a total is a row: its dims are the inputs' dims but the scanned one
    totals = [b.empty_like_stacked(_stacked_type(st), blocks, 0, "block totals", None,
                                   lambda d, x=x: b.dim_size(x, b.slice_dim(d - 1, dim)))
              for st, x in zip(scan.slice_types, xs)]

    # 1. scan blocks 0..nb-2 on their own; their last rows are the totals.
    n = len(xs)
    last_block = arith.SubIOp(blocks, b.index(1)).result
    phase1, j, shared, block = _forall(last_block, 0, outs + totals)
    with ir.InsertionPoint(block):
        start, count = block_range(j)
        x_blk = [b.extract_range(x, dim, start, count) for x in xs]
        o_blk = [b.extract_range(o, dim, start, count) for o in shared[:n]]
        scanned = scan.rows(x_blk, o_blk, None)
        last = b.step_index(arith.SubIOp(count, b.index(1)).result, count, reverse)
        result = scanned + scan.step(scanned, last)
    with ir.InsertionPoint(_in_parallel(block)):
        for part, full in zip(result[:n], shared[:n]):
            b.parallel_insert_range(part, full, dim, start, count)
        for part, full in zip(result[n:], shared[n:]):
            b.parallel_insert_step(part, full, 0, j)
    outs, totals = list(phase1.results)[:n], list(phase1.results)[n:]

    # 2. totals[j] becomes the carry entering block j + 1.
    loop = scf.ForOp(b.index(1), last_block, b.index(1), totals)
    anchor = b.anchor_at_end(loop.body)
    acc = list(loop.inner_iter_args)
    with ir.InsertionPoint(anchor):
        iv = loop.induction_variable
        prev, here = _totals_at(acc, arith.SubIOp(iv, b.index(1)).result, scan), _totals_at(acc, iv, scan)
    combined = scan.combine(prev, here, anchor)
    with ir.InsertionPoint(anchor):
        scf.YieldOp([b.insert_step(c, t, 0, iv) for c, t in zip(combined, acc)])
    anchor.erase()
    carries = list(loop.results)

    # 3. scan blocks 1..nb-1 from their carries.
    phase2, j, shared, block = _forall(blocks, 1, outs)
    with ir.InsertionPoint(block):
        start, count = block_range(j)
        x_blk = [b.extract_range(x, dim, start, count) for x in xs]
        o_blk = [b.extract_range(o, dim, start, count) for o in shared]
        carry = _totals_at(carries, arith.SubIOp(j, b.index(1)).result, scan)
        scanned = scan.rows(x_blk, o_blk, carry)
    with ir.InsertionPoint(_in_parallel(block)):
        for part, full in zip(scanned, shared):
            b.parallel_insert_range(part, full, dim, start, count)
    return list(phase2.results)


def _stacked_type(slice_type: ir.Type) -> ir.Type:
    shape = [ir.ShapedType.get_dynamic_size()] + [
        ir.ShapedType.get_dynamic_size() if slice_type.is_dynamic_dim(k) else slice_type.get_dim_size(k)
        for k in range(slice_type.rank)
    ]
    return ir.RankedTensorType.get(shape, slice_type.element_type)


def _totals_at(totals, j, scan: _Scan):
    return [b.extract_step(t, 0, j, st) for t, st in zip(totals, scan.slice_types)]
