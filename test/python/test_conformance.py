"""Control-flow programs of the kinds PyTorch's own control-flow tests use, compiled strictly
through torch.compile(backend="tidal") and compared with eager, called with several sizes so that
Dynamo makes sizes symbolic: shape predicates, SymInt operands, Python-int carries returned to
the caller, reductions in a while_loop's cond, clone-and-mutate bodies, associative_scan nested in
scan. (Adapted from test/functorch/test_control_flow.py and torch/testing/_internal/hop_db.py.)
"""

import contextlib

import pytest
import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops import associative_scan, scan, while_loop


def shape_predicate(x):
    return torch.cond(x.shape[0] > 4, lambda x: x.sin(), lambda x: x.cos(), (x,))


def one_element_predicate(p, x):
    return torch.cond(p, lambda x: x.sin(), lambda x: x.cos(), (x,))


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
    "one_element_predicate": (
        one_element_predicate,
        [(p, torch.randn(3)) for p in (torch.tensor([True]), torch.zeros(1, 1, dtype=torch.bool), torch.tensor([0.0]), torch.ones(1, 1, dtype=torch.int64))],
    ),
    "cond_reads_a_reduction": (cond_reads_a_reduction, [(torch.zeros(n, 3),) for n in (2, 3, 4)]),
    "body_clones_and_mutates": (body_clones_and_mutates, [(torch.zeros(n, 3),) for n in (2, 3, 4)]),
    "python_int_counter": (python_int_counter, [(torch.ones(n),) for n in (3, 4, 5)]),
    "returns_the_counter": (returns_the_counter, [(torch.ones(n),) for n in (3, 4, 5)]),
    "scan_closes_over_an_int": (scan_closes_over_an_int, [(torch.randn(4, 3), n) for n in (1, 2, 3)]),
    "associative_scan_in_scan": (associative_scan_in_scan, [(torch.zeros(4), torch.randn(t, 4)) for t in (3, 5)]),
}


def on_device(tree, device):
    """The tensors of `tree` moved to `device` (the same ones on the CPU)."""
    return pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, tree)


def _making_tensors_on(device):
    """Factory calls without a device (torch.zeros(3) in a body) make them on `device`; nothing
    on the CPU."""
    return contextlib.nullcontext() if torch.device(device).type == "cpu" else torch.device(device)


@pytest.mark.parametrize("name", list(CASES))
def test_program_compiles_strictly_and_matches_eager(name):
    check_case(name)


def check_case(name, device="cpu"):
    """CASES[name] at each of its sizes, compiled once, on `device` (test_gpu_suites.py: CUDA)."""
    fn, calls = CASES[name]
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"fallback": "error"})
    with torch.no_grad(), _making_tensors_on(device):
        for args in calls:
            args = on_device(args, device)
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
    check_hop_db_program(info, dtype)


def check_hop_db_program(info, dtype, device="cpu", **tolerance):
    """hop_db's samples of `info` on `device` (test_gpu_suites.py: CUDA), each compiled afresh."""
    for sample in info.sample_inputs(device, dtype, requires_grad=False):
        args = (sample.input, *sample.args)
        torch._dynamo.reset()
        compiled = torch.compile(info.op, backend="tidal", fullgraph=True, options={"fallback": "error"})
        with torch.no_grad(), _making_tensors_on(device):
            torch.testing.assert_close(compiled(*args, **sample.kwargs), info.op(*args, **sample.kwargs), **tolerance)


def _grad_cases():
    # The hop_db programs with inputs that require grad (while_loop's sample has none).
    return [
        c
        for c in _hop_db_cases()
        if any(t.requires_grad for s in c.values[0].sample_inputs("cpu", torch.float64, requires_grad=True)
               for t in pytree.tree_leaves((s.input, s.args, s.kwargs)) if isinstance(t, torch.Tensor))
    ]


def hop_db_grads(fn, args, kwargs, leaves):
    """The gradients of `leaves` for a random cotangent of each output of `fn` that needs one
    (drawn in float64 on the CPU, then given the output's dtype and device). The CPU is named:
    test_gpu_suites.py calls this under a torch.device("cuda") context, which would otherwise put
    the draw on CUDA, where a CPU generator is refused."""
    outs = [o for o in pytree.tree_leaves(fn(*args, **kwargs)) if isinstance(o, torch.Tensor) and o.requires_grad]
    g = torch.Generator().manual_seed(0)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64, device="cpu").to(o.device, o.dtype)).sum() for o in outs)
    return torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)


@pytest.mark.parametrize("info", _grad_cases())
def test_pytorch_hop_db_gradients(info):
    """Gradients of PyTorch's HOP OpInfo programs through tidal's autodiff, against eager autograd
    and float64 gradcheck of the compiled program."""
    for sample in info.sample_inputs("cpu", torch.float64, requires_grad=True):
        args = (sample.input, *sample.args)
        leaves = [t for t in pytree.tree_leaves((args, sample.kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
        torch._dynamo.reset()
        compiled = torch.compile(info.op, backend="tidal", fullgraph=True, options={"fallback": "error"})
        for got, want in zip(hop_db_grads(compiled, args, sample.kwargs, leaves), hop_db_grads(info.op, args, sample.kwargs, leaves)):
            torch.testing.assert_close(got, want)
        # eager's HOP autograd is not a reference on its own (FOUNDATION.md, "Eager's own
        # mistakes"): float64 finite differences of the compiled program are a second one
        # (gradcheck keeps the graph between backward calls: no donated buffers)
        torch._dynamo.reset()
        with torch._functorch.config.patch(donated_buffer=False):
            checked = torch.compile(info.op, backend="tidal", fullgraph=True, options={"fallback": "error"})
            flat, spec = pytree.tree_flatten(args)  # gradcheck perturbs top-level tensors only

            def flat_call(*values):
                return checked(*pytree.tree_unflatten(list(values), spec), **sample.kwargs)

            assert torch.autograd.gradcheck(flat_call, tuple(flat))


# -- associative_scan under torch.compile: one op, any combine, nested or not ----------------------


def linear_recurrence(a, b):
    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    return associative_scan(combine, (a, b), dim=0, combine_mode="generic")[1]


def matrix_products(m):
    """Not elementwise: products of 2x2 matrices, scanned from the end along dim 1."""
    return associative_scan(lambda p, q: p @ q, m, dim=1, reverse=True, combine_mode="generic")


def associative_scan_in_cond(p, x):
    def then(x):
        return associative_scan(lambda a, b: torch.maximum(a, b), x, dim=0, combine_mode="generic")

    return torch.cond(p.sum() > 0, then, lambda x: x.clone(), (x,))


ASSOCIATIVE_SCANS = {
    "linear_recurrence": (linear_recurrence, lambda t: (0.5 + 0.5 * torch.rand(t, 16), torch.randn(t, 16))),
    "matrix_products": (matrix_products, lambda t: (0.5 * torch.randn(3, t, 2, 2),)),
    "in_scan": (associative_scan_in_scan, lambda t: (torch.zeros(t, 4), torch.randn(3, t, 4))),
    "in_cond": (associative_scan_in_cond, lambda t: (torch.ones(()), torch.randn(t, 5))),
}


def _imported_ir(tmp_path, fn, args) -> str:
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"dump_dir": str(tmp_path)})
    with torch.no_grad():
        # eager combines in a tree, tidal's CPU loop in sequence: sums over 1000 steps round apart
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-4, atol=1e-4)
    return "\n".join(p.read_text() for p in sorted(tmp_path.glob("graph*/00-torch.mlir")))


@pytest.mark.parametrize("length", [8, 1000])
@pytest.mark.parametrize("name", list(ASSOCIATIVE_SCANS))
def test_generic_associative_scan_stays_one_op_under_dynamo(tmp_path, name, length):
    """Dynamo would trace torch's recursive algorithm (hundreds of ops growing with log T, seconds
    to compile); tidal keeps ONE tidal.associative_scan, so the program does not grow with T."""
    fn, make_args = ASSOCIATIVE_SCANS[name]
    text = _imported_ir(tmp_path, fn, make_args(length))
    assert text.count('"tidal.associative_scan"') == 1, text
    assert text.count("torch.aten.") < 25, text


def scaled_rows(w, v):
    """Per-row affine maps v_t = w_t * v_{t-1} + v_t with w [T, 3] and v [T, 3, 2]: only v's
    result is used, and it reads w's element, never w's running product."""

    def combine(left, right):
        (w1, v1), (w2, v2) = left, right
        return w1 * w2, v1 * w2.unsqueeze(-1) + v2

    return associative_scan(combine, (w, v), dim=0, combine_mode="generic")[1]


@pytest.mark.parametrize("length", [1, 2, 9])
def test_an_unused_result_of_a_different_shape_is_not_computed(length):
    """The CPU loop drops w's running product (lit: associative-scan-in-place.mlir); the prefix it
    carries for v must be read with v's slice shape, not w's."""
    w, v = 0.5 + 0.5 * torch.rand(length, 3), torch.randn(length, 3, 2)
    compiled = torch.compile(scaled_rows, backend="tidal", fullgraph=True, options={"fallback": "error"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(w, v), scaled_rows(w, v))


def test_other_backends_still_trace_torchs_algorithm():
    """Only graphs for tidal keep the HOP: Inductor cannot compile it on the CPU."""
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    a, b = ASSOCIATIVE_SCANS["linear_recurrence"][1](16)
    torch.compile(linear_recurrence, backend=recording_backend, fullgraph=True)(a, b)
    (gm,) = graphs
    targets = [str(n.target) for n in gm.graph.nodes]
    assert not any("associative_scan" in t for t in targets)
    assert len(targets) > 50  # torch's expansion


def test_eager_fallback_of_a_graph_with_a_generic_combine_matches_eager():
    """A graph tidal hands back to eager runs the HOP's eager kernel, which must vmap a combine that
    is not elementwise (torch's kernel calls it on whole batches of slices)."""
    from tidal.dynamo import TidalFallbackWarning

    def products_and_int8(m, k):
        return matrix_products(m), k * k  # 8-bit integer arithmetic: tidal refuses it

    m, k = 0.5 * torch.randn(2, 6, 2, 2), torch.arange(4, dtype=torch.int8)
    compiled = torch.compile(products_and_int8, backend="tidal", fullgraph=True, options={"fallback": "warn"})
    with torch.no_grad(), pytest.warns(TidalFallbackWarning, match="8-bit"):
        got = compiled(m, k)
    torch.testing.assert_close(got, products_and_int8(m, k))
