"""torch.linalg ops whose eager kernels check their `info` (solve, cholesky, inv, lu_factor) inside
a `scan` step and at the top level, under torch.compile, forward and gradients. torch 2.13 threads
an effect token through `_linalg_check_errors`; inside a loop body that token was a FakeTensor
constant of the traced graph ('Cannot access data pointer of Tensor'). References: the same
program as a Python loop."""

import pytest
import torch
from torch._higher_order_ops import scan

import tidal  # noqa: F401  (registers the backend)
from loop_reference import python_scan

N, M, T = 4, 2, 6


def _problem():
    torch.manual_seed(0)
    A = torch.eye(N) + 0.1 * torch.randn(N, N)
    H = torch.randn(M, N)
    return dict(A=A, At=A.t().contiguous(), H=H, Ht=H.t().contiguous(), Q=0.1 * torch.eye(N), R=0.2 * torch.eye(M))


def kalman(scan_fn, x0, P0, ys, A, At, H, Ht, Q, R):
    """A Kalman filter: predict, then correct with the gain K = P Hᵀ S⁻¹ (S = H P Hᵀ + R)."""
    def step(carry, y):
        x, P = carry
        x, P = A @ x, A @ P @ At + Q
        S = H @ P @ Ht + R
        K = torch.linalg.solve(S, H @ P).t()
        x = x + K @ (y - H @ x)
        P = P - K @ H @ P
        return (x, P), x.clone()

    (x, P), xs = scan_fn(step, (x0, P0), ys)
    return x, P, xs


def spd_steps(scan_fn, op, x0, ys, W):
    """A carry updated through `op` on a symmetric positive definite matrix built from each step."""
    def step(x, y):
        S = W + torch.outer(y, y) + torch.eye(W.shape[0])
        if op == "cholesky":
            z = torch.cholesky_solve(x.unsqueeze(1), torch.linalg.cholesky(S)).squeeze(1)
        elif op == "inv":
            z = torch.linalg.inv(S) @ x
        elif op == "lu_factor":
            LU, pivots = torch.linalg.lu_factor(S)
            z = torch.linalg.lu_solve(LU, pivots, x.unsqueeze(1)).squeeze(1)
        else:  # solve_triangular: no info check, the control
            z = torch.linalg.solve_triangular(torch.linalg.cholesky(S), x.unsqueeze(1), upper=False).squeeze(1)
        x = torch.tanh(z + y)
        return x, x.clone()

    return scan_fn(step, x0, ys)


def _check(fn, inputs, wanted_grads):
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"fallback": "error"})
    with torch.no_grad():
        got, want = compiled(scan, *inputs), fn(python_scan, *inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    leaves = [inputs[i].detach().requires_grad_(True) for i in wanted_grads]
    grads = []
    for run, scan_fn in ((compiled, scan), (fn, python_scan)):
        args = list(inputs)
        for i, leaf in zip(wanted_grads, leaves):
            args[i] = leaf
        outs = run(scan_fn, *args)
        grads.append(torch.autograd.grad(sum((o * o).sum() for o in outs), leaves))
    for g, w in zip(*grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_kalman_filter_solve_in_scan():
    p = _problem()
    inputs = (torch.zeros(N), torch.eye(N), torch.randn(T, M), p["A"], p["At"], p["H"], p["Ht"], p["Q"], p["R"])
    _check(kalman, inputs, wanted_grads=[1, 2, 8])  # P0, ys, R


@pytest.mark.parametrize("op", ["cholesky", "inv", "lu_factor", "solve_triangular"])
def test_linalg_op_in_scan(op):
    torch.manual_seed(0)
    W = torch.randn(N, N)
    inputs = (torch.randn(N), torch.randn(T, N), W @ W.t())
    _check(lambda scan_fn, x0, ys, W: spd_steps(scan_fn, op, x0, ys, W), inputs, wanted_grads=[0, 1, 2])


def test_solve_at_top_level():
    torch.manual_seed(0)
    S, B = torch.randn(3, 3) + 3 * torch.eye(3), torch.randn(3, 2)
    compiled = torch.compile(lambda S, B: torch.linalg.solve(S, B) + 1, backend="tidal", options={"fallback": "error"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(S, B), torch.linalg.solve(S, B) + 1)


def _singular_steps(scan_fn, op, x0, Ss):
    def step(x, S):
        if op == "solve":
            x = torch.linalg.solve(S, x)
        elif op == "cholesky":
            x = torch.linalg.cholesky(S) @ x
        else:
            x = torch.linalg.inv(S) @ x
        return x, x.clone()

    return scan_fn(step, x0, Ss)


@pytest.mark.parametrize("where", ["top level", "scan step"])
@pytest.mark.parametrize("op", ["solve", "cholesky", "inv"])
def test_a_failed_info_check_raises_eagers_error(op, where):
    """A singular (or, for cholesky, indefinite) matrix raises eager's LinAlgError with eager's
    message, never inf/nan: the info check runs as an ATen call after the factorization."""
    bad = torch.diag(torch.tensor([1.0, -1.0, 0.0])) if op == "cholesky" else torch.zeros(3, 3)
    x0 = torch.randn(3)
    if where == "top level":
        fn, args = (lambda S, x: _singular_steps(lambda f, c, xs: f(c, xs[0]), op, x, S.unsqueeze(0))), (bad, x0)
    else:
        fn, args = (lambda S, x: _singular_steps(scan, op, x, torch.stack([torch.eye(3), S]))), (bad, x0)
    with pytest.raises(torch.linalg.LinAlgError) as eager_error:
        fn(*args)
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"fallback": "error"})
    with torch.no_grad(), pytest.raises(torch.linalg.LinAlgError) as tidal_error:
        compiled(*args)
    assert str(eager_error.value) in str(tidal_error.value)
    with torch.no_grad():  # the same compiled program on a good matrix
        good = torch.eye(3) * 2
        torch.testing.assert_close(compiled(good, x0), fn(good, x0))
