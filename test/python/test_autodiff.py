"""Training through torch.compile(backend="tidal"): tidal's reverse-mode rules for the control-flow
ops, PyTorch's derivative formulas for every other op. Gradients against eager autograd and
float64 gradcheck, strict (a graph that fell back to eager would match eager and prove nothing).
"""

from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops import associative_scan, map as hop_map, scan, while_loop

from loop_reference import python_loops
from tidal.tools.tidal_compile import load_program_file
from tidal.dynamo import training_ir

STRICT = {"fallback": "error"}
CORPUS = Path(__file__).parents[1] / "corpus"
# No output depends on a float input or parameter.
NOTHING_TO_DIFFERENTIATE = {"scan_pytree_dict"}


def _requiring_grad(tree):
    return torch.utils._pytree.tree_map(
        lambda t: t.detach().clone().requires_grad_(t.dtype.is_floating_point) if isinstance(t, torch.Tensor) else t,
        tree,
    )


def _grads(fn, args, leaves, seed=0, cotangent_dtype=None):
    """(fn's outputs, the gradients of `leaves`) for a random cotangent of each float output,
    drawn on the CPU in `cotangent_dtype` (default: the output's), then given the output's dtype
    and device: a reference in float64 on the CPU gets the same cotangents as a float32 program
    on CUDA when both draw in float32. The CPU is named: `_check_gradients(device=...)` calls
    this under a torch.device context, which would put the draw there (and refuse a CPU
    generator on CUDA)."""
    out = fn(*args)
    floats = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]
    gen = torch.Generator().manual_seed(seed)
    # one cotangent per float output, whether or not it needs grad (a constant output may need
    # none in one program and look differentiable in another)
    pairs = [(o, torch.randn(o.shape, generator=gen, dtype=cotangent_dtype or o.dtype, device="cpu").to(o.device, o.dtype)) for o in floats]
    pairs = [(o, g) for o, g in pairs if o.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
    # a compiled graph gives zeros where eager autograd finds no path (and says None)
    return out, [torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves)]


def _leaves(model, args):
    params = [p for p in model.parameters()] if isinstance(model, torch.nn.Module) else []
    return [t for t in torch.utils._pytree.tree_leaves(args) if isinstance(t, torch.Tensor) and t.requires_grad] + params


def _check_gradients(model, args, rtol=1e-4, atol=1e-4, compiled=None, device=None):
    """tidal's gradients against eager autograd of the same program with its scans and
    while_loops run as Python loops (loop_reference.py says why not PyTorch's HOP autograd).
    With a `device` (test_gpu_suites.py: "cuda"), tidal runs a copy of the model and the inputs
    there (tensors made without a device made there too), the reference stays on the CPU; a
    `compiled` given with a device must be of `model` itself (a function: nothing to copy)."""
    args = _requiring_grad(args)
    leaves = _leaves(model, args)
    if device is None:
        compiled = compiled or torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)
        out, got = _grads(compiled, args, leaves)
    else:
        on_device = copy.deepcopy(model).to(device) if isinstance(model, torch.nn.Module) else model
        device_args = _requiring_grad(torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, args))
        compiled = compiled or torch.compile(on_device, backend="tidal", fullgraph=True, options=STRICT)
        with torch.device(device):
            out, got = _grads(compiled, device_args, _leaves(on_device, device_args))
        out, got = torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, (out, got))
    with python_loops(model):
        expected_out, expected = _grads(model, args, leaves)
    torch.testing.assert_close(out, expected_out, rtol=rtol, atol=atol)
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("path", [p for p in sorted(CORPUS.glob("*.py")) if p.stem not in NOTHING_TO_DIFFERENTIATE], ids=lambda p: p.stem)
def test_corpus_gradients_match_eager(path):
    model, inputs = load_program_file(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_gradients(model, inputs)


def test_a_program_file_loaded_twice_is_two_modules():
    """Each load of FILE.py is a module of its own. Dynamo guards a model's globals through its
    module's name: when a second load replaced the first under that name, differentiating the
    second model (its `scan` swapped for a Python loop in the eager reference) after the first had
    been imported failed inside Dynamo ("object of type 'NoneType' has no len()", a guard on
    `scan.__defaults__`)."""
    from tidal.compiler import gpu_function
    from tidal.importer import import_program

    path = str(CORPUS / "nested_map_scan_cond.py")
    first, first_inputs = load_program_file(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu_function(import_program(first, first_inputs))
        torch._dynamo.reset()
        model, inputs = load_program_file(path)
        _check_gradients(model, inputs)


# -- one program per rule, gradchecked in float64 ---------------------------------------------------


def _scan_loss_grads(outs, wrt):
    """Cotangents of `wrt` for the loss sum(h) + sum(hs²) of a scan's (h, hs)."""
    h, hs = outs
    return torch.autograd.grad(h.sum() + (hs * hs).sum(), wrt)


def _grads_vs_python_loop(compiled, fn, args, wrt, **tolerance):
    """`compiled`'s gradients against `fn`'s with its scans run as Python loops."""
    got = _scan_loss_grads(compiled(*args), wrt)
    with python_loops(fn):
        expected = _scan_loss_grads(fn(*args), wrt)
    torch.testing.assert_close(got, expected, **tolerance)


def rnn(h0, xs, w, u):
    def step(h, x):
        h = torch.tanh(x @ w + h @ u)
        return h, h * 2.0

    return scan(step, h0, xs)


def branchy(p, x, w):
    return torch.cond(p.sum() > 0, lambda x, w: torch.sin(x @ w), lambda x, w: x.exp() * w.sum(), (x, w))


def per_row(xs, w):
    return hop_map(lambda x, w: torch.tanh(x @ w), xs, w)


def linear_recurrence(a, b):
    return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, combine_mode="generic")[1]


def matrix_products(m):
    return associative_scan(lambda p, q: p @ q, m, dim=1, reverse=True, combine_mode="generic")


def log_cumsum_exp(x):
    return associative_scan(torch.logaddexp, x, dim=1, reverse=True, combine_mode="generic")


def weighted_products(x, w):
    """x ∘ y = x + y + w·x·y (associative: 1 + w(x ∘ y) = (1 + wx)(1 + wy)), w a captured weight
    broadcast into the elementwise combine: its cotangent sums over every step."""
    return associative_scan(lambda l, r: l + r + w * l * r, x, dim=0, combine_mode="generic")


def grow_until(x, w):
    """A data-dependent trip count: iterate until the norm passes 4 (or 50 steps)."""

    def cond_fn(i, x):
        return (x.norm() < 4.0) & (i < 50)

    def body_fn(i, x):
        return i + 1, torch.tanh(x @ w) * 1.5 + x

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


def _f64(*shapes, scale=0.5):
    gen = torch.Generator().manual_seed(7)
    return tuple((torch.randn(s, generator=gen, dtype=torch.float64, device="cpu") * scale).requires_grad_() for s in shapes)


GRADCHECK = {
    "scan": (rnn, lambda: _f64((2, 3), (5, 2, 3), (3, 3), (3, 3))),
    "cond_true": (branchy, lambda: (torch.ones(2, dtype=torch.float64), *_f64((2, 3), (3, 3)))),
    "cond_false": (branchy, lambda: (-torch.ones(2, dtype=torch.float64), *_f64((2, 3), (3, 3)))),
    "map": (per_row, lambda: _f64((4, 3), (3, 2))),
    "associative_scan": (linear_recurrence, lambda: (torch.rand(6, 3, dtype=torch.float64).add(0.5).requires_grad_(), *_f64((6, 3)))),
    "associative_scan_matmul": (matrix_products, lambda: _f64((2, 5, 2, 2))),
    "associative_scan_logaddexp": (log_cumsum_exp, lambda: _f64((3, 7, 2))),
    "associative_scan_const": (weighted_products, lambda: _f64((6, 4), (4,))),
    "while_loop": (grow_until, lambda: _f64((2, 3), (3, 3), scale=0.3)),
    "while_loop_never_runs": (grow_until, lambda: (torch.full((2, 3), 5.0, dtype=torch.float64).requires_grad_(), *_f64((3, 3)))),
}


@pytest.mark.parametrize("name", list(GRADCHECK))
def test_gradcheck_float64(name):
    fn, make = GRADCHECK[name]
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options=STRICT)

    def float_outputs(*args):  # gradcheck differentiates every output: drop integer ones
        outs = torch.utils._pytree.tree_leaves(compiled(*args))
        return tuple(o for o in outs if o.dtype.is_floating_point)

    assert torch.autograd.gradcheck(float_outputs, make(), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_while_loop_gradients_for_any_trip_count(compiled_programs):
    """One compiled forward/backward pair serves every trip count (no maximum given), including a
    loop that never runs; gradients against the same loop in Python."""
    from loop_reference import python_while_loop

    w = (torch.randn(3, 3, generator=torch.Generator().manual_seed(5)) * 0.3).requires_grad_()
    compiled = torch.compile(grow_until, backend="tidal", fullgraph=True, options=STRICT)
    trips = set()
    for scale in (0.05, 0.5, 1.0, 2.0, 3.0):
        x = (torch.ones(2, 3) * scale).requires_grad_()
        n, y = compiled(x, w)
        got = torch.autograd.grad(y.sum(), (x, w))
        n2, y2 = python_while_loop(lambda i, x: (x.norm() < 4.0) & (i < 50), lambda i, x: (i + 1, torch.tanh(x @ w) * 1.5 + x), (torch.zeros((), dtype=torch.int64), x))
        assert int(n) == int(n2)
        trips.add(int(n))
        expected = torch.autograd.grad(y2.sum(), (x, w), allow_unused=True)
        torch.testing.assert_close(got, tuple(torch.zeros_like(t) if g is None else g for g, t in zip(expected, (x, w))))
    assert 0 in trips and len(trips) >= 4, trips
    assert len(compiled_programs) == 2  # one forward, one backward


def test_scan_with_an_integer_carry():
    """Integer values get no cotangent; the float carry's gradient flows (reference: a loop)."""

    def counting(xs, w):
        def step(carry, x):
            n, h = carry
            h = torch.tanh(h * w + x)
            return (n + (h > 0).to(torch.int64), h), h.clone()

        (n, h), hs = scan(step, (torch.zeros(3, dtype=torch.int64), torch.zeros(3)), xs)
        return n, h, hs

    def loop(xs, w):
        h, hs = torch.zeros(3), []
        for x in xs:
            h = torch.tanh(h * w + x)
            hs.append(h)
        return h, torch.stack(hs)

    xs, w = torch.randn(6, 3, requires_grad=True), torch.tensor(0.7, requires_grad=True)
    n, h, hs = torch.compile(counting, backend="tidal", fullgraph=True, options=STRICT)(xs, w)
    assert n.dtype == torch.int64 and not n.requires_grad
    got = torch.autograd.grad((h.sum() + (hs * hs).sum()), (xs, w))
    h2, hs2 = loop(xs, w)
    expected = torch.autograd.grad((h2.sum() + (hs2 * hs2).sum()), (xs, w))
    torch.testing.assert_close(got, expected)


# -- training ----------------------------------------------------------------------------------------


class GRUScan(torch.nn.Module):
    def __init__(self, d_in=4, d_h=8):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.wx = torch.nn.Parameter(torch.randn(d_in, 3 * d_h, generator=gen) * d_in**-0.5)
        self.wh = torch.nn.Parameter(torch.randn(d_h, 3 * d_h, generator=gen) * d_h**-0.5)
        self.out = torch.nn.Linear(d_h, 1)
        self.d_h = d_h

    def forward(self, xs):
        d = self.d_h

        def step(h, x):
            gx, gh = x @ self.wx, h @ self.wh
            r = torch.sigmoid(gx[:, :d] + gh[:, :d])
            z = torch.sigmoid(gx[:, d : 2 * d] + gh[:, d : 2 * d])
            n = torch.tanh(gx[:, 2 * d :] + r * gh[:, 2 * d :])
            h = (1 - z) * n + z * h
            return h, h.clone()

        h, hs = scan(step, torch.zeros(xs.shape[1], d), xs)
        return self.out(hs).squeeze(-1)


def _train(model, forward, steps=20):
    gen = torch.Generator().manual_seed(11)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, target = torch.randn(6, 5, 4, generator=gen), torch.randn(6, 5, generator=gen)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(forward(xs), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_twenty_sgd_steps_of_a_gru_scan_match_eager():
    eager, tidal_model = GRUScan(), GRUScan()
    tidal_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(tidal_model, backend="tidal", fullgraph=True, options=STRICT)
    eager_losses, tidal_losses = _train(eager, eager), _train(tidal_model, compiled)
    torch.testing.assert_close(tidal_losses, eager_losses, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(tidal_model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert eager_losses[-1] < eager_losses[0]  # it does train


def test_inference_under_no_grad_compiles_one_program(compiled_programs):
    model = GRUScan()
    compiled = torch.compile(model, backend="tidal", options=STRICT)
    with torch.no_grad():
        compiled(torch.randn(6, 5, 4))
    assert len(compiled_programs) == 1


def test_training_compiles_a_forward_and_a_backward_program(compiled_programs, tmp_path):
    model = GRUScan()
    compiled = torch.compile(model, backend="tidal", options={**STRICT, "dump_dir": str(tmp_path)})
    compiled(torch.randn(6, 5, 4)).sum().backward()
    assert len(compiled_programs) == 2
    assert all(p.grad is not None for p in model.parameters())
    (graph,) = tmp_path.glob("graph*")
    assert sorted(p.name for p in graph.iterdir() if p.is_dir()) == ["backward", "forward"]
    backward_ir = (graph / "backward" / "00-torch.mlir").read_text()
    assert backward_ir.count('"tidal.scan"') == 1  # the adjoint is one reverse scan


def test_double_backward_is_refused_clearly():
    xs = torch.randn(5, 2, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    compiled = torch.compile(rnn, backend="tidal", options=STRICT)
    h, _ = compiled(torch.zeros(2, 3), xs, w, w)
    (g,) = torch.autograd.grad(h.sum(), w, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


# -- memory ------------------------------------------------------------------------------------------


def _forward_residual_bytes(compiled_graphs, user_outputs: int) -> int:
    """Bytes the compiled forward returns beyond the user's outputs: what is kept for backward
    (a residual that is one of the user's outputs under another name costs nothing)."""
    fw = compiled_graphs[0]
    (out,) = [n for n in fw.graph.nodes if n.op == "output"]

    def root(n):
        while isinstance(n, torch.fx.Node) and n.target is torch.ops.aten.alias.default:
            n = n.args[0]
        return n

    outputs = {root(o) for o in out.args[0][:user_outputs]}
    residuals = [r for r in out.args[0][user_outputs:] if isinstance(r, torch.fx.Node) and root(r) not in outputs]
    vals = [r.meta["val"] for r in residuals if isinstance(r.meta.get("val"), torch.Tensor)]
    return sum(v.numel() * v.element_size() for v in vals)


@pytest.mark.parametrize("combine", ["linear_recurrence"])
def test_associative_scan_backward_memory_is_linear_in_length(compiled_graphs, combine):
    """PyTorch's rule builds a T×T matrix; tidal keeps the results (and inputs): O(T)."""
    per_step = []
    for length in (1024, 8192, 65536):
        compiled_graphs.clear()
        torch._dynamo.reset()
        a = (0.5 + 0.5 * torch.rand(length, 16)).requires_grad_()
        b = torch.randn(length, 16, requires_grad=True)
        compiled = torch.compile(linear_recurrence, backend="tidal", fullgraph=True, dynamic=False, options=STRICT)
        compiled(a, b).sum().backward()
        per_step.append(_forward_residual_bytes(compiled_graphs, 1) / length)
    assert per_step[0] == per_step[1] == per_step[2], per_step
    assert per_step[0] <= 4 * 16 * 4  # a, b, and both scanned results: 4 floats per channel


def test_scan_keeps_one_carry_per_step(compiled_graphs):
    """The residuals of a scan are the carries entering each step (and its inputs), nothing per
    intermediate: T × B × H floats for the RNN, whatever its body computes."""
    h0, xs, w, u = torch.zeros(4, 8), torch.randn(50, 4, 8, requires_grad=True), torch.randn(8, 8), torch.randn(8, 8)
    compiled = torch.compile(rnn, backend="tidal", fullgraph=True, options=STRICT)
    h, hs = compiled(h0, xs, w.requires_grad_(), u.requires_grad_())
    (h.sum() + hs.sum()).backward()
    carries = 50 * 4 * 8 * 4
    assert _forward_residual_bytes(compiled_graphs, 2) <= 2 * carries + xs.numel() * 4 + 2 * 8 * 8 * 4


@pytest.mark.parametrize("length,k,kept", [(64, 8, 8), (60, 8, 10), (64, 1, 64)])
def test_scan_checkpoint_keeps_one_carry_per_segment_with_equal_gradients(compiled_graphs, length, k, kept):
    """scan_checkpoint=k: segments of s steps (s the largest divisor of T not above k) keep only
    the carry entering each segment; the backward recomputes the rest. Gradients as without."""
    gen = torch.Generator().manual_seed(2)
    h0 = torch.zeros(4, 8)
    xs = torch.randn(length, 4, 8, generator=gen).requires_grad_()
    w, u = (torch.randn(8, 8, generator=gen) * 0.3).requires_grad_(), (torch.randn(8, 8, generator=gen) * 0.3).requires_grad_()
    compiled = torch.compile(rnn, backend="tidal", fullgraph=True, options={**STRICT, "scan_checkpoint": k})
    _grads_vs_python_loop(compiled, rnn, (h0, xs, w, u), (xs, w, u), rtol=1e-4, atol=1e-4)  # weight cotangents summed in another order
    carry = 4 * 8 * 4
    inputs = xs.numel() * 4 + 2 * 8 * 8 * 4
    assert _forward_residual_bytes(compiled_graphs, 2) == kept * carry + inputs


def two_rnns(h0, xs, w, u):
    """The first scan checkpointed every 8 steps by its own block, the second keeping every step."""
    import tidal

    with tidal.checkpoint(8):
        h, hs = rnn(h0, xs, w, u)
    h2, hs2 = rnn(h0, xs * 0.5, u, w)
    return h + h2, hs + hs2


def test_checkpoint_block_applies_to_its_own_scan_only(compiled_graphs):
    """`with tidal.checkpoint(k)` is per op: it overrides the global option (here: none) for the
    scans inside the block only. Gradients as without checkpoints."""
    gen = torch.Generator().manual_seed(3)
    h0 = torch.zeros(4, 8)
    xs = torch.randn(64, 4, 8, generator=gen).requires_grad_()
    w, u = (torch.randn(8, 8, generator=gen) * 0.3).requires_grad_(), (torch.randn(8, 8, generator=gen) * 0.3).requires_grad_()
    compiled = torch.compile(two_rnns, backend="tidal", fullgraph=True, options=STRICT)
    _grads_vs_python_loop(compiled, two_rnns, (h0, xs, w, u), (xs, w, u), rtol=1e-4, atol=1e-4)
    carry = 4 * 8 * 4
    kept = (64 // 8 + 64) * carry
    final_carries = 2 * carry  # the adjoint reads each step's new carry: the next one's entering carry, or the final one
    assert kept <= _forward_residual_bytes(compiled_graphs, 2) <= kept + final_carries + 2 * xs.numel() * 4 + 2 * 8 * 8 * 4


@pytest.mark.parametrize("value", [0, -2, 2.5, "four", True])
def test_scan_checkpoint_option_is_checked(value):
    import tidal
    from tidal.dynamo import scan_checkpoint_option

    with pytest.raises(ValueError, match="scan_checkpoint must be a positive integer"):
        scan_checkpoint_option({"scan_checkpoint": value})
    with pytest.raises(ValueError, match="scan_checkpoint must be a positive integer"):
        tidal.checkpoint(value)
    assert scan_checkpoint_option({"scan_checkpoint": "16"}) == 16
    assert scan_checkpoint_option({}) == 1


def python_int_counter(x, w):
    return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, torch.tanh(x @ w)), (0, x))


def test_while_loop_with_a_python_int_carry_differentiates():
    """The counter is a 0-d tensor inside the recorded loop and a Python int at the caller. Was:
    refused ("carries are not all tensors"; PyTorch's own rule fails on it too)."""
    gen = torch.Generator().manual_seed(2)
    _check_gradients(python_int_counter, (torch.randn(2, 3, generator=gen), torch.randn(3, 3, generator=gen) * 0.5))


def test_a_rule_refusing_a_graph_gives_one_fallback_warning_and_eager_gradients(monkeypatch):
    """A rule that refuses while aot_autograd traces (in the backend): the graph runs in eager,
    gradients included, with one warning naming why; strict mode raises instead."""
    import tidal.autodiff.map as map_rule
    from tidal.diagnostics import TidalUnsupported
    from tidal.dynamo import TidalCompileError, TidalFallbackWarning
    from tidal.tracing import tidal_backend_is_tracing

    original = map_rule.MapAutogradOp.apply

    def refusing(*args):
        if tidal_backend_is_tracing():
            raise TidalUnsupported("the map rule refuses this graph (test)")
        return original(*args)

    monkeypatch.setattr(map_rule.MapAutogradOp, "apply", refusing)
    xs, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True)
    compiled = torch.compile(per_row, backend="tidal", options={"fallback": "warn"})
    with pytest.warns(TidalFallbackWarning, match="the map rule refuses this graph") as caught:
        got = torch.autograd.grad(compiled(xs, w).sum(), (xs, w))
    assert len([c for c in caught if issubclass(c.category, TidalFallbackWarning)]) == 1
    torch.testing.assert_close(got, torch.autograd.grad(per_row(xs, w).sum(), (xs, w)))
    torch._dynamo.reset()
    with pytest.raises(TidalCompileError, match="the map rule refuses this graph"):
        torch.compile(per_row, backend="tidal", options=STRICT)(xs, w)


def gated(h0, xs, w, u, v):
    def step(h, x):
        h = torch.tanh(x @ w + h @ u) * torch.sigmoid(h @ v)
        return h, h.clone()

    return scan(step, h0, xs)


def test_scan_adjoint_repeats_no_forward_contraction():
    """The adjoint keeps the step's values whose recomputation would repeat a matmul (the gates
    here; the new carry comes free as the next entering one) instead of running the forward again:
    its body has the backward's six matmuls, not those plus the forward's three (and so does step 0,
    run after the loop: it enters with the initial carry, see test_scan_entering_carries_are_outputs)."""
    gen = torch.Generator().manual_seed(4)
    h0 = torch.zeros(4, 8)
    xs = torch.randn(12, 4, 8, generator=gen).requires_grad_()
    w, u, v = [(torch.randn(8, 8, generator=gen) * 0.3).requires_grad_() for _ in range(3)]
    _, backward_ir = training_ir(gated, h0, xs, w, u, v)
    assert backward_ir.count('"tidal.scan"') == 1
    assert _scan_body(backward_ir).count("torch.aten.mm ") == 6, backward_ir
    assert backward_ir.count("torch.aten.mm ") <= 12, backward_ir
    compiled = torch.compile(gated, backend="tidal", fullgraph=True, options=STRICT)
    _grads_vs_python_loop(compiled, gated, (h0, xs, w, u, v), (xs, w, u, v), rtol=1e-4, atol=1e-5)


def test_scan_adjoint_skips_cotangents_nobody_wants():
    """xs that need no gradient cost no per-step `dx = dpre @ Wᵀ` matmul in the adjoint."""
    h0, xs = torch.zeros(4, 8), torch.randn(12, 4, 8)
    w, u, v = [(torch.randn(8, 8) * 0.3).requires_grad_() for _ in range(3)]
    _, backward_ir = training_ir(gated, h0, xs, w, u, v)
    assert _scan_body(backward_ir).count("torch.aten.mm ") == 5, backward_ir
    assert backward_ir.count("torch.aten.mm ") <= 10, backward_ir


def _rnn_with_states(h0, xs, w, u):
    def step(h, x):
        h = torch.tanh(x @ w + h @ u)
        return h, h.clone()

    return scan(step, h0, xs)


def test_scan_entering_carries_are_outputs():
    """A carry that is also a per-step output (h, h.clone()) enters step t > 0 as output t - 1: the
    forward stacks no copy of it (its scan returns the final carry and the outputs only), the
    reverse scan reads a view of the outputs for steps T-1..1, and step 0 runs after it with the
    initial carry, whose gradient it gives."""
    gen = torch.Generator().manual_seed(8)
    h0 = (torch.randn(4, 8, generator=gen) * 0.5).requires_grad_()
    xs = torch.randn(12, 4, 8, generator=gen)
    w, u = [(torch.randn(8, 8, generator=gen) * 0.3).requires_grad_() for _ in range(2)]
    forward_ir, backward_ir = training_ir(_rnn_with_states, h0, xs, w, u, stage="tidal")
    assert re.findall(r'%\d+:(\d+) = "tidal.scan"', forward_ir) == ["2"], forward_ir
    assert "[11,4,8]" in backward_ir, backward_ir  # steps 1..11 of the outputs, read in the loop
    compiled = torch.compile(_rnn_with_states, backend="tidal", fullgraph=True, options=STRICT)
    _grads_vs_python_loop(compiled, _rnn_with_states, (h0, xs, w, u), (h0, w, u), rtol=1e-4, atol=1e-5)
    double = [h0.detach().double().requires_grad_(), xs.double(), *[t.detach().double().requires_grad_() for t in (w, u)]]
    assert torch.autograd.gradcheck(torch.compile(_rnn_with_states, backend="tidal", fullgraph=True, options=STRICT),
                                    double, eps=1e-6, atol=1e-5)


def _scan_body(ir_text: str) -> str:
    (scan_op,) = [part for part in ir_text.split('"tidal.scan"')[1:]]
    return scan_op.split("}) {", 1)[0]


def test_scan_contractions_leave_the_loop():
    """tidal-scan-contractions: x_t·W runs as one matmul of all steps before the forward loop, the
    weight cotangents as one matmul each after the reverse one; the adjoint loop keeps dh·Uᵀ only."""
    gen = torch.Generator().manual_seed(6)
    h0, xs = torch.zeros(4, 8), torch.randn(12, 4, 8, generator=gen)
    w, u = [(torch.randn(8, 8, generator=gen) * 0.3).requires_grad_() for _ in range(2)]
    forward_ir, backward_ir = training_ir(rnn, h0, xs, w, u, stage="tidal")
    assert "!torch.vtensor<[48,8],f32>" in forward_ir.split('"tidal.scan"')[0]  # [T·B, H] before the loop
    assert _scan_body(forward_ir).count("torch.aten.mm ") == 1, forward_ir
    assert _scan_body(backward_ir).count("torch.aten.mm ") == 1, backward_ir
    assert backward_ir.count("torch.aten.mm ") == 3, backward_ir
    compiled = torch.compile(rnn, backend="tidal", fullgraph=True, options=STRICT)
    _grads_vs_python_loop(compiled, rnn, (h0, xs, w, u), (w, u), rtol=1e-4, atol=1e-5)


def sum_of_products(acc0, a, b):
    """Σ_t a_t·b_tᵀ in a carry: neither factor is stacked transposed (the general concatenation)."""

    def step(acc, ab):
        a_t, b_t = ab
        return acc + a_t @ b_t.t(), a_t.sum(0)

    return scan(step, acc0, (a, b))


@pytest.mark.parametrize("length", [7, None])
def test_accumulated_products_sum_after_the_loop(length, tmp_path):
    gen = torch.Generator().manual_seed(7)
    args = (torch.randn(3, 5, generator=gen), torch.randn(7, 3, 4, generator=gen), torch.randn(7, 5, 4, generator=gen))
    compiled = torch.compile(sum_of_products, backend="tidal", fullgraph=True,
                             options={**STRICT, "dump_dir": str(tmp_path)})
    if length is None:
        torch._dynamo.mark_dynamic(args[1], 0)
        torch._dynamo.mark_dynamic(args[2], 0)
    with torch.no_grad():
        got = compiled(*args)
    with python_loops(sum_of_products):
        expected = sum_of_products(*args)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    (tidal_ir,) = tmp_path.glob("graph*/01-tidal.mlir")
    assert "num_carries = 0" in tidal_ir.read_text()


def test_scan_of_dynamic_length_differentiates(compiled_graphs):
    """A length marked dynamic: the step is cut only in the backward (symbolic shapes), keeping
    nothing; gradients as the Python loop's for every length, one compiled graph."""
    gen = torch.Generator().manual_seed(5)
    w, u = [(torch.randn(8, 8, generator=gen) * 0.3).requires_grad_() for _ in range(2)]
    compiled = torch.compile(rnn, backend="tidal", options=STRICT)
    for length in (5, 7, 9):
        h0, xs = torch.zeros(2, 8), torch.randn(length, 2, 8, generator=gen).requires_grad_()
        torch._dynamo.mark_dynamic(xs, 0)
        _grads_vs_python_loop(compiled, rnn, (h0, xs, w, u), (xs, w, u), rtol=1e-4, atol=1e-5)
    assert len(compiled_graphs) == 2  # one forward, one backward: the length is symbolic in both


def branch_on(p, x, w):
    return torch.cond(p, lambda x, w: torch.sin(x @ w), lambda x, w: x.exp() * w.sum(), (x, w))


@pytest.mark.parametrize("pred", [torch.tensor([True]), torch.zeros(1, 1, dtype=torch.bool), torch.tensor([0.5])],
                         ids=["(1,)", "(1,1)", "float"])
def test_cond_on_a_one_element_predicate_differentiates(pred):
    """Eager takes any one-element predicate. Was: refused ("must be a 0-d bool tensor")."""
    gen = torch.Generator().manual_seed(6)
    x, w = torch.randn(2, 3, generator=gen).requires_grad_(), torch.randn(3, 3, generator=gen).requires_grad_()
    compiled = torch.compile(branch_on, backend="tidal", fullgraph=True, options=STRICT)
    out, got = _grads(compiled, (pred, x, w), [x, w])
    in_python = torch.sin(x @ w) if pred else x.exp() * w.sum()
    expected_out, expected = _grads(lambda *args: in_python, (), [x, w])
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(got, expected)


# -- symbolic sizes reaching the rules (torch.compile(dynamic=True)) ---------------------------------
# Dynamo hands the HOPs sizes: SymInt carries, SymInts lifted into bodies as operands, SymBool
# predicates. One program per forward and backward must serve every size (no recompilation).


def count_to_rows(x):
    """A Python-int counter bounded by a size: the bound enters cond as a SymInt operand."""
    return while_loop(lambda i, x: i < x.shape[0] - 3, lambda i, x: (i + 1, torch.sin(x) * 1.5), (0, x))


def count_rows_down(x):
    """A size as a carry, counted down; the body reads another size."""
    return while_loop(lambda n, x: n > 3, lambda n, x: (n - 1, torch.cos(x) * x.shape[1] * 0.4), (x.shape[0], x))


def tensor_counter_to_rows(x):
    return while_loop(
        lambda i, x: i < x.shape[0] - 3, lambda i, x: (i + 1, torch.tanh(x) + x), (torch.zeros((), dtype=torch.int64), x)
    )


LOOPS_OVER_SIZES = [count_to_rows, count_rows_down, tensor_counter_to_rows]


@pytest.mark.parametrize("fn", LOOPS_OVER_SIZES, ids=lambda f: f.__name__)
def test_while_loop_over_sizes_differentiates_for_every_size(fn, compiled_graphs):
    """Against the same loop in Python, 3 rows running it zero times. Was: the rule refused the
    int/SymInt carries, and called zeros_like on a size among the consts (the cotangent
    accumulators); a stacked carry of dynamic shape could not be allocated."""
    check_while_loop_over_sizes(fn)
    assert len(compiled_graphs) == 2  # one forward, one backward: every size symbolic


def check_while_loop_over_sizes(fn, device=None):
    """`fn` compiled once with every size symbolic, trained at 3, 5 and 6 rows (on `device`:
    test_gpu_suites.py)."""
    compiled = torch.compile(fn, backend="tidal", dynamic=True, fullgraph=True, options=STRICT)
    gen = torch.Generator().manual_seed(11)
    for rows in (3, 5, 6):
        _check_gradients(fn, (torch.randn(rows, 4, generator=gen, device="cpu") * 0.5,), compiled=compiled, device=device)


def cond_on_rows(x, w):
    return torch.cond(x.shape[0] < 5, lambda x, w: torch.sin(x @ w), lambda x, w: x.exp() * w.sum(), (x, w))


def cond_on_rows_in_python(x, w):
    return torch.sin(x @ w) if x.shape[0] < 5 else x.exp() * w.sum()


def nested_cond_on_rows(x, w):
    def few(x, w):
        return torch.cond(x.shape[0] < 5, lambda x, w: torch.tanh(x @ w) * x.shape[0], lambda x, w: x @ w, (x, w))

    return torch.cond(x.shape[0] < 5, few, lambda x, w: x.cos() @ w, (x, w))


def nested_cond_on_rows_in_python(x, w):
    return torch.tanh(x @ w) * x.shape[0] if x.shape[0] < 5 else x.cos() @ w


@pytest.mark.parametrize(
    "fn, in_python", [(cond_on_rows, cond_on_rows_in_python), (nested_cond_on_rows, nested_cond_on_rows_in_python)],
    ids=["cond", "nested"],
)
def test_cond_on_a_shape_differentiates_for_every_size(fn, in_python, compiled_graphs):
    """A SymBool predicate and SymInt operands (sizes the branches read). Was: the predicate
    could not be saved for the backward (save_values_for_backward takes tensors and ints), and
    the sizes' cotangents (None) were made contiguous."""
    compiled = torch.compile(fn, backend="tidal", dynamic=True, fullgraph=True, options=STRICT)
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(3, 3, generator=gen).requires_grad_()
    for rows in (2, 7, 4, 9):  # never 3, the columns: duck sizing would make them one symbol
        x = torch.randn(rows, 3, generator=gen).requires_grad_()
        out, got = _grads(compiled, (x, w), [x, w])
        expected_out, expected = _grads(in_python, (x, w), [x, w])
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(got, expected)
    assert len(compiled_graphs) == 2


def linear_recurrence_over_time(a, b):
    """h_t = a_t h_{t-1} + b_t along dim 1 of [B, T]."""
    return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=1, combine_mode="generic")[1]


def linear_recurrence_in_python(a, b):
    h, hs = b[:, 0], [b[:, 0]]
    for t in range(1, b.shape[1]):
        h = a[:, t] * h + b[:, t]
        hs.append(h)
    return torch.stack(hs, 1)


def products_per_batch(x):
    """x ∘ y = x + y + x·y/B (associative: 1 + (x ∘ y)/B = (1 + x/B)(1 + y/B)): the combine
    reads a size, which enters it as a SymInt operand."""
    return associative_scan(lambda l, r: l + r + l * r / l.shape[0], x, dim=1, combine_mode="generic")


def products_per_batch_in_python(x):
    y, ys = x[:, 0], [x[:, 0]]
    for t in range(1, x.shape[1]):
        y = y + x[:, t] + y * x[:, t] / x.shape[0]
        ys.append(y)
    return torch.stack(ys, 1)


@pytest.mark.parametrize(
    "fn, in_python, make",
    [
        (linear_recurrence_over_time, linear_recurrence_in_python, lambda b, t, g: (torch.rand(b, t, generator=g) + 0.5, torch.randn(b, t, generator=g))),
        (products_per_batch, products_per_batch_in_python, lambda b, t, g: (torch.randn(b, t, generator=g) * 0.3,)),
    ],
    ids=["linear_recurrence", "combine_reads_a_size"],
)
def test_associative_scan_differentiates_for_every_size(fn, in_python, make, compiled_graphs):
    """Every dim symbolic, so the combine's operands (slices [B]) are too. Was: "unhashable type:
    non-nested SymInt" (the elementwise test hashed the combine's shapes), then zeros_like of a
    size among the consts, then an empty tensor without its sizes (tidal-transposes-to-generics)."""
    compiled = torch.compile(fn, backend="tidal", dynamic=True, fullgraph=True, options=STRICT)
    gen = torch.Generator().manual_seed(9)
    for batch, length in ((3, 5), (4, 8), (2, 11)):
        args = [t.requires_grad_() for t in make(batch, length, gen)]
        out, got = _grads(compiled, args, args)
        expected_out, expected = _grads(in_python, args, args)
        torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert len(compiled_graphs) == 2
