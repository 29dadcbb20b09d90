"""Ops over long rows, each program run in a fork-server child (tool_runner.py): a crash that
depends on the size (a stack overflow is a SIGSEGV) fails its test with the signal instead of
killing pytest.

The linear recurrence `associative_scan` over dim 1 of [16, 131072] f32 died with a segmentation
fault at its first call, and so did its forward + backward at [16, 65536]: the 16x16 tiles of the
transposes around the scan each left 2 KiB on the stack (`tidal-hoist-stack-slots`). Rows of 2^17
and 2^21 elements run here along dim 0, a middle dim and the last one, forward (inference) and
forward + backward, with one thread (every loop on the caller's stack) and with two (libgomp's
worker stacks), and a `scan` over the last dim (the transposes that bring that dim to the front
run in 16x16 tiles too).

Values are checked against eager; gradients against the adjoint of the recurrence written out
(`recurrence_adjoint`, float64), itself checked against eager autograd of the recurrence as a
Python loop (a loop of 2^21 steps would take minutes).

Tensors past 2^31 bytes (byte offsets past a 32-bit index) are opt-in: TIDAL_TEST_HUGE=1 runs the
recurrence over the last dim of [16, 2^25 + 16] f32, 2 GiB a tensor and 13 GiB at its peak
(forward only: training keeps several more 2 GiB tensors alive, its residuals and cotangents,
past what this 24 GB machine can spare).
"""

from __future__ import annotations

import functools
import os
import textwrap
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops import associative_scan, scan

from loop_reference import python_scan

HERE = Path(__file__).parent


def _combine(l, r):
    return (l[0] * r[0], r[0] * l[1] + r[1])


def linear_recurrence(a, b, dim):
    """y_t = a_t * y_{t-1} + b_t along `dim` (y_0 = b_0)."""
    return associative_scan(_combine, (a, b), dim=dim, combine_mode="generic")[1]


def recurrence_adjoint(a, b, w, dim):
    """(y, ∂L/∂a, ∂L/∂b) for L = sum(w * y): the cotangent of y_t is g_t = w_t + a_{t+1} g_{t+1},
    a reverse recurrence; ∂L/∂b_t = g_t and ∂L/∂a_t = g_t y_{t-1} (0 at t = 0, where y_0 = b_0)."""
    n = a.shape[dim]
    y = linear_recurrence(a, b, dim)
    a_next = torch.cat([a.narrow(dim, 1, n - 1), torch.zeros_like(a.narrow(dim, 0, 1))], dim)
    g = associative_scan(_combine, (a_next, w), dim=dim, reverse=True, combine_mode="generic")[1]
    y_prev = torch.cat([torch.zeros_like(y.narrow(dim, 0, 1)), y.narrow(dim, 0, n - 1)], dim)
    return y, g * y_prev, g


def _inputs(shape, count=3):
    """a in [0.5, 1) (the recurrence stays bounded), then b and a cotangent w."""
    g = torch.Generator().manual_seed(0)
    return (torch.rand(shape, generator=g) * 0.5 + 0.5, *(torch.randn(shape, generator=g) for _ in range(count - 1)))


def _rows(t, dim, rows):
    """`t` as rows along `dim` ([C, L]), only those in `rows` (None: all)."""
    flat = t.movedim(dim, -1).reshape(-1, t.shape[dim])
    return flat if rows is None else flat[rows]


def check_linear_recurrence(shape, dim):
    """In the child: inference, then training, of the recurrence compiled by tidal (strict). The
    rows are independent: past 2^17 steps eager computes the first and the last alone (all 16 took
    about 45 s of eager's recursive scan at 2^21, the reference adjoint's float64 scans most of it)."""
    rows = None if shape[dim] <= 2**17 else [0, -1]
    a, b, w = _inputs(shape)
    program = functools.partial(linear_recurrence, dim=dim)
    with torch.no_grad():
        got = torch.compile(program, backend="tidal")(a, b)
        want = linear_recurrence(_rows(a, dim, rows), _rows(b, dim, rows), 1)
        torch.testing.assert_close(_rows(got, dim, rows), want, rtol=1e-4, atol=1e-4)
    del got
    torch._dynamo.reset()
    a.requires_grad_(), b.requires_grad_()
    y = torch.compile(program, backend="tidal")(a, b)
    grads = torch.autograd.grad(y, (a, b), w)
    expected = recurrence_adjoint(*(_rows(t.detach(), dim, rows).double() for t in (a, b, w)), 1)
    for got, want in zip((y, *grads), expected):
        torch.testing.assert_close(_rows(got, dim, rows), want.float(), rtol=1e-4, atol=1e-4)


def check_scan(shape):
    """In the child: a scan over the last dim (a running sum), compiled by tidal (strict), against
    cumsum (eager's scan runs a Python step per element: 20 s for 2^17 steps). Small integers keep
    every sum exact, so both orders give the same floats."""
    g = torch.Generator().manual_seed(0)
    h = torch.randint(-4, 5, shape[:-1], generator=g).float()
    xs = torch.randint(-4, 5, shape, generator=g).float()
    program = lambda h, xs: scan(lambda c, x: (c + x, (c + x) * 2), h, xs, dim=len(shape) - 1)  # noqa: E731
    with torch.no_grad():
        carry, ys = torch.compile(program, backend="tidal")(h, xs)
    running = h.unsqueeze(-1) + xs.cumsum(-1)
    torch.testing.assert_close(carry, running[..., -1], rtol=0, atol=0)
    torch.testing.assert_close(ys, running * 2, rtol=0, atol=0)


def run_in_child(fork_server, call: str, threads: int, timeout: int = 600):
    fork_server.exec_ok(textwrap.dedent(f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(HERE)!r})
        import torch
        torch.set_num_threads({threads})
        import test_long_rows
        test_long_rows.{call}
        print("OK")
    """), timeout=timeout)


def test_recurrence_adjoint_is_the_python_loops_gradient():
    """The reference the long tests use, against eager autograd of the recurrence as a loop."""
    for shape, dim in (((7, 3), 0), ((2, 9, 3), 1), ((3, 8), 1)):
        a, b, w = (t.double() for t in _inputs(shape))
        a.requires_grad_(), b.requires_grad_()
        _, ys = python_scan(lambda y, x: (x[0] * y + x[1],) * 2, b.select(dim, 0) * 0, (a, b), dim=dim)
        # the loop's first step is a_0 * 0 + b_0 = b_0, as the scan's first element
        want = torch.autograd.grad(ys, (a, b), w)
        y, *got = recurrence_adjoint(a.detach(), b.detach(), w, dim)
        torch.testing.assert_close(y, ys.detach())
        for g, expected in zip(got, want):
            torch.testing.assert_close(g, expected)


# (length, threads): a row of 2^21 f32 is 8 MiB, the default stack size
SIZES = [(2**17, 1), (2**21, 2)]
# every dim of the op: [L, 16] along dim 0, [2, L, 8] along a middle dim, [16, L] along the last
# (the layout; its transposes run in 16x16 tiles)
LAYOUTS = {"dim0": lambda n: ((n, 16), 0), "dim1": lambda n: ((2, n, 8), 1), "last": lambda n: ((16, n), 1)}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("length,threads", SIZES, ids=["2^17-1thread", "2^21-2threads"])
def test_linear_recurrence_over_long_rows(fork_server, layout, length, threads):
    shape, dim = LAYOUTS[layout](length)
    run_in_child(fork_server, f"check_linear_recurrence({shape}, {dim})", threads)


@pytest.mark.parametrize("length,threads", SIZES, ids=["2^17-1thread", "2^21-2threads"])
def test_scan_over_a_long_last_dim(fork_server, length, threads):
    run_in_child(fork_server, f"check_scan((2, 16, {length}))", threads)


@pytest.mark.skipif(os.environ.get("TIDAL_TEST_HUGE") != "1", reason="opt-in (TIDAL_TEST_HUGE=1): 13 GiB, minutes")
def test_linear_recurrence_past_2_31_bytes(fork_server):
    run_in_child(fork_server, f"check_huge_linear_recurrence({2**25 + 16})", 2, timeout=1800)


def check_huge_linear_recurrence(length):
    """In the child: [16, length] f32 past 2^31 bytes, the recurrence over the last dim. Eager
    computes the first and the last row alone (the last one's elements sit past 2^31 bytes into
    the transposed buffers)."""
    a, b = _inputs((16, length), 2)
    with torch.no_grad():
        got = torch.compile(functools.partial(linear_recurrence, dim=1), backend="tidal")(a, b)
        want = linear_recurrence(_rows(a, 1, [0, -1]), _rows(b, 1, [0, -1]), 1)
        torch.testing.assert_close(_rows(got, 1, [0, -1]), want, rtol=1e-4, atol=1e-4)
