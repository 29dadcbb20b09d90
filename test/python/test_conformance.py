"""Control-flow programs of the kinds PyTorch's own control-flow tests use, compiled strictly
through torch.compile(backend="tidal") and compared with eager, called with several sizes so that
Dynamo makes sizes symbolic: shape predicates, SymInt operands, Python-int carries returned to
the caller, reductions in a while_loop's cond, clone-and-mutate bodies, associative_scan nested in
scan. (Adapted from test/functorch/test_control_flow.py and torch/testing/_internal/hop_db.py.)
"""

import pytest
import torch
from torch._higher_order_ops import associative_scan, scan, while_loop


def shape_predicate(x):
    return torch.cond(x.shape[0] > 4, lambda x: x.sin(), lambda x: x.cos(), (x,))


def branch_uses_a_size(x):
    n = x.shape[0]
    return torch.cond(x.sum() > 0, lambda x: x * n, lambda x: x + n, (x,))


def cond_reads_a_reduction(x):
    return while_loop(lambda c: c.sum() < 10, lambda c: (c + 1,), (x,))[0]


def body_clones_and_mutates(x):
    def body(c):
        y = c.clone()
        y.add_(1)
        return (y,)

    return while_loop(lambda c: (c < 10).all(), body, (x,))[0]


def python_int_counter(x):
    i, y = while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2), (0, x))
    return y * i


def returns_the_counter(x):
    return while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2), (0, x))


def scan_closes_over_an_int(xs, n):
    return scan(lambda c, x: (c + x * n, c.clone()), torch.zeros(3), xs)


def associative_scan_in_scan(init, xs):
    def body(c, x):
        y = associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="generic")
        return c + y, y

    return scan(body, init, xs)


CASES = {
    "shape_predicate": (shape_predicate, [(torch.randn(n, 3),) for n in (6, 3, 8)]),
    "branch_uses_a_size": (branch_uses_a_size, [(torch.randn(n, 3),) for n in (6, 3, 8)]),
    "cond_reads_a_reduction": (cond_reads_a_reduction, [(torch.zeros(n, 3),) for n in (2, 3, 4)]),
    "body_clones_and_mutates": (body_clones_and_mutates, [(torch.zeros(n, 3),) for n in (2, 3, 4)]),
    "python_int_counter": (python_int_counter, [(torch.ones(n),) for n in (3, 4, 5)]),
    "returns_the_counter": (returns_the_counter, [(torch.ones(n),) for n in (3, 4, 5)]),
    "scan_closes_over_an_int": (scan_closes_over_an_int, [(torch.randn(4, 3), n) for n in (1, 2, 3)]),
    "associative_scan_in_scan": (associative_scan_in_scan, [(torch.zeros(4), torch.randn(t, 4)) for t in (3, 5)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_program_compiles_strictly_and_matches_eager(name):
    fn, calls = CASES[name]
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"fallback": "error"})
    with torch.no_grad():
        for args in calls:
            expected, got = fn(*args), compiled(*args)
            torch.testing.assert_close(got, expected)
            # Python scalars come back as Python scalars, exactly as eager returns them
            flat_e, flat_g = torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(got)
            assert [type(v) for v in flat_g] == [type(v) for v in flat_e]


def test_one_program_serves_every_size(compiled_programs):
    programs = compiled_programs
    compiled = torch.compile(shape_predicate, backend="tidal", options={"fallback": "error"})
    with torch.no_grad():
        for n in (6, 3, 8, 2, 11):
            x = torch.randn(n, 3)
            torch.testing.assert_close(compiled(x), shape_predicate(x))
    assert len(programs) == 2  # the first size statically, then one program for every size


def _hop_db_cases():
    from torch.testing._internal.hop_db import hop_db

    # while_loop_stack_output (every iteration's carries stacked, a growing buffer) is the HOP
    # PyTorch's while_loop autograd uses internally: it lands with tidal's autodiff.
    kept = ("cond", "while_loop", "scan", "map", "associative_scan")
    return [pytest.param(info, id=f"{info.name}-{info.variant_test_name}") for info in hop_db if info.name in kept]


@pytest.mark.parametrize("info", _hop_db_cases())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pytorch_hop_db_program(info, dtype):
    """Every control-flow program of PyTorch's own HOP OpInfo database (torch/testing/_internal/hop_db.py)."""
    for sample in info.sample_inputs("cpu", dtype, requires_grad=False):
        args = (sample.input, *sample.args)
        torch._dynamo.reset()
        compiled = torch.compile(info.op, backend="tidal", fullgraph=True, options={"fallback": "error"})
        with torch.no_grad():
            torch.testing.assert_close(compiled(*args, **sample.kwargs), info.op(*args, **sample.kwargs))
