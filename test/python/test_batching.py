"""conversion/batching.py: a region's body batched over a leading dim, checked on the CPU.

The GPU backend runs a non-elementwise associative_scan combine and a map body batched
(`plan._batched_plan`). Here each batched body, taken from the IR the GPU plan sees, is compiled
for the CPU and run on N random slices: slice i of its results must be the user's own per-slice
function applied to slice i of its arguments."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._higher_order_ops import associative_scan
from torch_mlir import ir

from tidal.compiler import gpu_function, lower
from tidal.conversion.batching import Unbatchable, batched_function
from tidal.importer import import_program
from tidal.runtime.executable import NativeFunction, signature_of

def scaled_rows(left, right):  # operands of different shapes: an expand_shape
    (w1, v1), (w2, v2) = left, right
    return w1 * w2, v1 * w2.unsqueeze(-1) + v2


def sum_predicate(a, b):  # a row reduction, a select and a captured literal
    return torch.cond(a.sum() > 0, lambda a, b: a + b, lambda a, b: a * b, (a, b))


def matrix_product(p, q):  # linalg.matmul
    return p @ q


def transposed_product(p, q):  # a transpose and a matmul
    return p.transpose(0, 1) @ q


def positions(a, b):  # linalg.index of a dim that moves
    return a + b * torch.arange(4.0)


def scaled_by_peak(a, b):  # a full reduction (0-d) expanded to [1], and collapsed back
    return a + b * a.amax(dim=0, keepdim=True) + b.sum().reshape(())


def branches_of_matmuls(p, q):  # a cond that stays a cond: both branches batched, then a select
    return torch.cond(p.sum() > 0, lambda p, q: p @ q, lambda p, q: q @ p - p, (p, q))


def halves(a, b):  # slices and a concatenation
    return torch.cat([a[:2] + b[2:], a[2:] * b[:2]])


CASES = {
    "scaled_rows": (scaled_rows, ((3,), (3, 2))),
    "sum_predicate": (sum_predicate, ((4,),)),
    "matrix_product": (matrix_product, ((2, 2),)),
    "transposed_product": (transposed_product, ((3, 3),)),
    "positions": (positions, ((4,),)),
    "halves": (halves, ((4,),)),
    "branches_of_matmuls": (branches_of_matmuls, ((2, 2),)),
    "scaled_by_peak": (scaled_by_peak, ((4,),)),
}


def _combine_region(combine, shapes, length=5):
    """The tidal.associative_scan of `combine` in the IR the GPU plan sees."""
    xs = tuple(torch.randn(length, *s) for s in shapes)

    def program(*xs):
        return associative_scan(combine, xs if len(xs) > 1 else xs[0], dim=0, combine_mode="generic")

    return _region_op(program, xs, "tidal.associative_scan")


def _region_op(program, inputs, name, outermost=False, dynamic_shapes=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu = gpu_function(import_program(program, inputs, dynamic_shapes=dynamic_shapes))
    found = []

    def visit(op):
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    gpu.module.operation.walk(visit)  # post-order: an op nested in another of its kind first
    if outermost:
        return gpu, found[-1]
    (op,) = found
    return gpu, op


def _on_the_cpu(fn, context):
    with context, ir.Location.unknown():
        del fn.attributes["sym_visibility"]
        module = ir.Module.create()
        module.body.append(fn)
        args, results = signature_of(module, "main")
        lower(module, context, "llvm", start="linalg")
        return NativeFunction.from_llvm_module(module, "main", args, results)


@pytest.mark.parametrize("name", list(CASES))
def test_a_batched_combine_is_the_combine_on_every_slice(name):
    combine, shapes = CASES[name]
    gpu, op = _combine_region(combine, shapes)
    k = ir.IntegerAttr(op.attributes["num_xs"]).value
    block = op.regions[0].blocks[0]
    with op.context, op.location:
        fn = batched_function(block, [i < 2 * k for i in range(len(block.arguments))], "main")
    assert "func.func" in str(fn) and "tensor<?x" in str(fn)
    native = _on_the_cpu(fn, op.context)
    n = 7
    lhs, rhs = [torch.randn(n, *s) for s in shapes], [torch.randn(n, *s) for s in shapes]
    got = native(*lhs, *rhs)
    for i in range(n):
        one = lambda xs: xs[0][i] if len(xs) == 1 else tuple(x[i] for x in xs)  # noqa: E731
        want = combine(one(lhs), one(rhs))
        want = list(want) if isinstance(want, tuple) else [want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g[i], w)


def test_a_gather_of_a_dynamic_size_reads_each_slices_own_slice():
    """Products of [B, 3, 3] stacks with B dynamic: torch-mlir broadcasts each operand with a
    gather generic (tensor.extract of the captured operand at index 0 where its size is 1). Batched,
    the gather reads slice i's operand for slice i."""
    def program(m):
        return associative_scan(lambda p, q: p @ q, m, dim=0, combine_mode="generic")

    dims = ({0: torch.export.Dim("T", min=2), 1: torch.export.Dim("B", min=2)},)
    gpu, op = _region_op(program, (torch.randn(5, 4, 3, 3),), "tidal.associative_scan", dynamic_shapes=dims)
    block = op.regions[0].blocks[0]
    with op.context, op.location:
        fn = batched_function(block, [True, True], "main")
    assert "tensor.extract" in str(fn)
    native = _on_the_cpu(fn, op.context)
    lhs, rhs = torch.randn(6, 2, 3, 3), torch.randn(6, 2, 3, 3)
    (got,) = native(lhs, rhs)
    torch.testing.assert_close(got, lhs @ rhs)


def test_a_batched_map_body_shares_the_values_it_closes_over():
    """map's extra operands (a weight) are not batched: every row reads the same one."""
    from torch._higher_order_ops.map import map as hop_map

    def program(xs, w, b):
        return hop_map(lambda x, w, b: torch.tanh(x @ w + b), xs, w, b)

    xs, w, b = torch.randn(5, 3, 4), torch.randn(4, 2), torch.randn(2)
    gpu, op = _region_op(program, (xs, w, b), "tidal.map")
    block = op.regions[0].blocks[0]
    assert len(block.arguments) == 3
    with op.context, op.location:
        fn = batched_function(block, [True, False, False], "main")
    native = _on_the_cpu(fn, op.context)
    rows = torch.randn(6, 3, 4)
    (got,) = native(rows, w, b)
    torch.testing.assert_close(got, torch.tanh(rows @ w + b))


def halving(a, b):  # a while_loop: each slice its own trip count
    from torch._higher_order_ops import while_loop

    (c,) = while_loop(lambda x: x.abs().sum() > 1.0, lambda x: (x * 0.5,), (a + b,))
    return c


def test_a_batched_while_loop_stops_each_slice_where_its_own_loop_would():
    """The loop runs while any slice's predicate holds; a finished slice keeps its carries."""
    gpu, op = _combine_region(halving, ((3,),))
    block = op.regions[0].blocks[0]
    with op.context, op.location:
        fn = batched_function(block, [True, True], "main")
    native = _on_the_cpu(fn, op.context)
    a, b = torch.randn(9, 3) * torch.logspace(-2, 3, 9).unsqueeze(1), torch.randn(9, 3)
    (got,) = native(a, b)
    for i in range(9):
        torch.testing.assert_close(got[i], halving(a[i], b[i]))


def test_a_batched_scan_walks_every_rows_steps_one_dim_further_in():
    """A scan inside a map body: the batched scan runs along dim 1 of its batched xs, its carries
    batched, its stacked outputs batched in front of the scan dim."""
    from torch._higher_order_ops.map import map as hop_map
    from torch._higher_order_ops.scan import scan

    def row(x, w):
        return scan(lambda c, y: (torch.tanh(c * w + y), c * y), torch.zeros(3), x)

    def program(xs, w):
        return hop_map(lambda x, w: row(x, w)[1], xs, w)

    w = torch.randn(3)
    gpu, op = _region_op(program, (torch.randn(4, 5, 3), w), "tidal.map")
    block = op.regions[0].blocks[0]
    with op.context, op.location:
        fn = batched_function(block, [True, False], "main")
    assert "tidal.scan" in str(fn)
    native = _on_the_cpu(fn, op.context)
    xs = torch.randn(6, 5, 3)
    (got,) = native(xs, w)
    for i in range(6):
        torch.testing.assert_close(got[i], row(xs[i], w)[1])


def test_a_map_inside_a_map_runs_batched_over_both_dims():
    """An inner map over a batched row's rows: one body over N·M flattened rows, a value batched
    over N repeated for each of its M rows, the results unflattened."""
    from torch._higher_order_ops.map import map as hop_map

    def inner(row, scale, w):
        return hop_map(lambda r, scale, w: torch.tanh(r @ w) * scale, row, scale, w)

    def program(xs, scales, w):
        return hop_map(lambda pair, w: inner(pair[0], pair[1].sum(), w), (xs, scales), w)

    w = torch.randn(4, 2)
    gpu, op = _region_op(program, (torch.randn(3, 5, 4), torch.randn(3, 2), w), "tidal.map", outermost=True)
    block = op.regions[0].blocks[0]
    with op.context, op.location:
        fn = batched_function(block, [True, True, False], "main")
    assert "tidal.map" not in str(fn)
    native = _on_the_cpu(fn, op.context)
    xs, scales = torch.randn(6, 5, 4), torch.randn(6, 2)
    (got,) = native(xs, scales, w)
    for i in range(6):
        torch.testing.assert_close(got[i], inner(xs[i], scales[i].sum(), w))


def test_an_op_without_a_batching_rule_is_unbatchable_and_named():
    """A cumsum (an ATen call on the GPU: it has no Triton lowering) has no batching rule: the GPU
    plan keeps the per-position combine."""
    gpu, op = _combine_region(lambda a, b: a + b.cumsum(0), ((3,),))
    block = op.regions[0].blocks[0]
    with op.context, op.location, pytest.raises(Unbatchable, match="aten::cumsum"):
        batched_function(block, [True, True], "main")
