"""`tidal-affine-scans` (GPU backend, torch level): a scan whose carry is affine in itself becomes
an associative_scan of the affine maps, its other per-step work lifted over the sequence.

The rewrite is target-independent torch IR, so its meaning is checked here on the CPU: the pass
is added to the CPU pipeline's `tidal` stage and the programs, forward and backward (whose
adjoint scans are affine too), are compared with the same recurrences written as Python loops.
On the GPU it is part of every program (test_gpu.py runs them there); the kernels it leads to
are checked in test_gpu_lowering.py."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops import scan

import tidal.backends.gpu.affine_scans as affine_scans
import tidal.compiler

B, T, D = 3, 11, 8


@pytest.fixture
def rewrites(monkeypatch):
    """The CPU pipeline with `tidal-affine-scans` after the `tidal` stage; records, per scan the
    pass looked at, whether it was rewritten."""
    stages = list(tidal.compiler.STAGES)
    i = [name for name, _ in stages].index("tidal")
    stages[i] = ("tidal", f"{stages[i][1]}, tidal-affine-scans")
    monkeypatch.setattr(tidal.compiler, "STAGES", stages)
    seen = []
    rewrite = affine_scans._rewrite
    monkeypatch.setattr(affine_scans, "_rewrite", lambda op: seen.append(rewrite(op)) or seen[-1])
    torch._dynamo.reset()
    return seen


def _gated(g, x, h0=None, reverse=False):
    def step(h, gx):
        h = gx[0].exp() * h + gx[1]
        return h, h.clone()

    h0 = torch.zeros_like(x[:, 0]) if h0 is None else h0
    return scan(step, h0, (g, x), dim=1, reverse=reverse)


def _gated_loop(g, x, h0=None, reverse=False):
    h = torch.zeros_like(x[:, 0]) if h0 is None else h0
    ys = [None] * x.shape[1]
    for t in (reversed(range(x.shape[1])) if reverse else range(x.shape[1])):
        h = g[:, t].exp() * h + x[:, t]
        ys[t] = h
    return h, torch.stack(ys, 1)


def _min_gru(xz, xh, h0):
    """minGRU: h = (1 - z) h + z h~; per-step outputs reading h before and after the step."""
    def step(h, zh):
        z = torch.sigmoid(zh[0])
        new = (1 - z) * h + z * torch.tanh(zh[1])
        return new, (new * 2 - h, h.clone())

    return scan(step, h0, (xz, xh), dim=1)


def _min_gru_loop(xz, xh, h0):
    h, ys, prev = h0, [], []
    for t in range(xz.shape[1]):
        z = torch.sigmoid(xz[:, t])
        new = (1 - z) * h + z * torch.tanh(xh[:, t])
        ys.append(new * 2 - h)
        prev.append(h)
        h = new
    return h, (torch.stack(ys, 1), torch.stack(prev, 1))


def _divided(a, x, h0):
    """h = (h - x_t) / (1 + exp(a_t)), neg and sub in the affine chain, h0 given."""
    def step(h, ax):
        new = -((h - ax[1]) / (1 + ax[0].exp()))
        return new, new.clone()

    return scan(step, h0, (a, x), dim=1)


def _divided_loop(a, x, h0):
    h, ys = h0, []
    for t in range(x.shape[1]):
        h = -((h - x[:, t]) / (1 + a[:, t].exp()))
        ys.append(h)
    return h, torch.stack(ys, 1)


def _gate(seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.nn.functional.logsigmoid(torch.randn(B, T, D, generator=gen, dtype=torch.float64) + 2)


def _randn(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


CASES = {
    "gated": (lambda: (_gate(0), _randn(1, B, T, D)), _gated, _gated_loop),
    "gated_h0_reverse": (lambda: (_gate(2), _randn(3, B, T, D), _randn(4, B, D)),
                         lambda g, x, h0: _gated(g, x, h0, reverse=True),
                         lambda g, x, h0: _gated_loop(g, x, h0, reverse=True)),
    "min_gru": (lambda: (_randn(5, B, T, D), _randn(6, B, T, D), _randn(7, B, D)), _min_gru, _min_gru_loop),
    "divided": (lambda: (_randn(8, B, T, D), _randn(9, B, T, D), _randn(10, B, D)), _divided, _divided_loop),
}


def _cotangents(out, seed=11):
    flat = torch.utils._pytree.tree_leaves(out)
    return [torch.randn(o.shape, generator=torch.Generator().manual_seed(seed + i), dtype=o.dtype) for i, o in enumerate(flat)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_affine_scan_matches_its_loop_forward_and_backward(rewrites, name):
    make, program, loop = CASES[name]
    inputs = make()
    compiled = torch.compile(program, backend="tidal", fullgraph=True, options={"fallback": "error"})
    args = [t.clone().requires_grad_() for t in inputs]
    ref_args = [t.clone().requires_grad_() for t in inputs]
    out, ref = compiled(*args), loop(*ref_args)
    torch.testing.assert_close(out, ref)
    cots = _cotangents(ref)
    torch.autograd.backward(torch.utils._pytree.tree_leaves(out), cots)
    torch.autograd.backward(torch.utils._pytree.tree_leaves(ref), cots)
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad)
    # the forward scan and its adjoint were both rewritten (a fallback would have raised)
    assert rewrites.count(True) >= 2, rewrites


def test_affine_scan_gradients_pass_gradcheck(rewrites):
    g, x, h0 = CASES["gated_h0_reverse"][0]()
    compiled = torch.compile(CASES["gated_h0_reverse"][1], backend="tidal", fullgraph=True, options={"fallback": "error"})
    inputs = tuple(t[:2, :5, :3].clone().requires_grad_() for t in (g, x)) + (h0[:2, :3].clone().requires_grad_(),)
    assert torch.autograd.gradcheck(lambda *a: compiled(*a)[1], inputs)
    assert True in rewrites


def _nonlinear(x, h0):
    def step(h, xt):
        new = torch.tanh(0.5 * h + xt)
        return new, new.clone()

    return scan(step, h0, x, dim=1)


def _constant_decay(x, h0, decay):
    def step(h, xt):
        new = decay * h + xt
        return new, new.clone()

    return scan(step, h0, x, dim=1)


def _squared(x, h0):
    def step(h, xt):
        new = h * h * xt + xt
        return new, new.clone()

    return scan(step, h0, x, dim=1)


@pytest.mark.parametrize("program,extra", [(_nonlinear, ()), (_constant_decay, (torch.full((D,), 0.9, dtype=torch.float64),)),
                                           (_squared, ())], ids=["tanh", "constant_decay", "h_squared"])
def test_a_scan_that_is_not_an_affine_recurrence_keeps_its_loop(rewrites, program, extra):
    """tanh of h, h·h: not affine; a constant decay: affine, but with no per-step pair to scan
    (left to the loop). Each still compiles and matches eager."""
    x, h0 = 0.3 * _randn(12, B, T, D), _randn(13, B, D)
    out = torch.compile(program, backend="tidal", fullgraph=True, options={"fallback": "error"})(x, h0, *extra)
    torch.testing.assert_close(out, program(x, h0, *extra))
    assert rewrites and not any(rewrites), rewrites


@pytest.mark.parametrize("dynamic", [None, True], ids=["length_changes", "all_dynamic"])
def test_a_dynamic_number_of_steps_is_rewritten_too(rewrites, dynamic):
    """Dynamo's graphs with symbolic sizes (the sequence length once it changes; every size with
    dynamic=True) keep the rewrite; the final carry comes from h0 and the states, right for any
    length."""
    def program(g, x, h0):
        h, ys = _gated(g, x, h0)
        return h, ys

    compiled = torch.compile(program, backend="tidal", options={"fallback": "error"}, dynamic=dynamic)
    for steps in (7, 3, 10):
        g, x, h0 = _gate(20 + steps)[:, :steps], _randn(40 + steps, B, steps, D), _randn(60 + steps, B, D)
        args = [t.clone().requires_grad_() for t in (g, x, h0)]
        ref_args = [t.clone().requires_grad_() for t in (g, x, h0)]
        out, ref = compiled(*args), _gated_loop(*ref_args)
        torch.testing.assert_close(out, ref)
        cots = _cotangents(ref)
        torch.autograd.backward(list(out), cots)
        torch.autograd.backward(list(ref), cots)
        for a, r in zip(args, ref_args):
            torch.testing.assert_close(a.grad, r.grad)
    # forward and adjoint of each graph: a static one, then one of dynamic length; or one dynamic
    assert len(rewrites) == (4 if dynamic is None else 2) and all(rewrites), rewrites
