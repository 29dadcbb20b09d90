"""Scans over any dim of [B, T, D]: PyTorch moves the dim to the front and back around the HOP,
and on the CPU `tidal-fold-scan-transposes` (lit: test/passes/fold-scan-transposes.mlir) scans
the tensors in place instead. Values and gradients against the Python loop, both directions."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops import associative_scan, scan

STRICT = {"fallback": "error"}


def _affine(left, right):
    return left[0] * right[0], right[0] * left[1] + right[1]


def _loop(g, x, dim, reverse):
    h, out = torch.zeros_like(x.select(dim, 0)), [None] * x.shape[dim]
    for t in (reversed(range(x.shape[dim])) if reverse else range(x.shape[dim])):
        h = g.select(dim, t) * h + x.select(dim, t)
        out[t] = h
    return torch.stack(out, dim)


def _by_scan(g, x, dim, reverse):
    def step(h, gx):
        h = gx[0] * h + gx[1]
        return h, h.clone()

    return scan(step, torch.zeros_like(x.select(dim, 0)), (g, x), dim=dim, reverse=reverse)[1]


def _by_associative_scan(g, x, dim, reverse):
    return associative_scan(_affine, (g, x), dim=dim, reverse=reverse, combine_mode="generic")[1]


@pytest.mark.parametrize("form", [_by_scan, _by_associative_scan], ids=["scan", "associative_scan"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_linear_recurrence_over_any_dim(form, dim, reverse):
    g, x = torch.rand(3, 5, 7, dtype=torch.float64) * 0.5 + 0.5, torch.randn(3, 5, 7, dtype=torch.float64)
    compiled = torch.compile(lambda g, x: form(g, x, dim, reverse), backend="tidal", options=STRICT)
    with torch.no_grad():
        torch.testing.assert_close(compiled(g, x), _loop(g, x, dim, reverse))
    cotangent = torch.randn(3, 5, 7, dtype=torch.float64)
    got = [t.clone().requires_grad_() for t in (g, x)]
    want = [t.clone().requires_grad_() for t in (g, x)]
    compiled(*got).backward(cotangent)
    _loop(*want, dim, reverse).backward(cotangent)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("form", [_by_scan, _by_associative_scan], ids=["scan", "associative_scan"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_a_long_recurrence_along_t_walks_each_row(form, reverse):
    """[3, 20000, 40] along T: the step writes its slice of the result in place and each row runs
    through all 20000 steps before the next (`tidal-write-steps-in-place`, `tidal-walk-scan-rows`);
    values against the Python loop."""
    gen = torch.Generator().manual_seed(0)
    g = torch.rand(3, 20000, 40, dtype=torch.float64, generator=gen) * 0.1 + 0.9
    x = torch.randn(3, 20000, 40, dtype=torch.float64, generator=gen)
    compiled = torch.compile(lambda g, x: form(g, x, 1, reverse), backend="tidal", options=STRICT)
    with torch.no_grad():
        torch.testing.assert_close(compiled(g, x), _loop(g, x, 1, reverse))
