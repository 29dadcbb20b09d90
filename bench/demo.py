"""tidal demo: three control-flow models compiled with torch.compile(backend="tidal") on the CPU.

For each model: the largest difference from eager PyTorch, and the median time of eager,
Inductor and tidal measured side by side in this run (ratios > 1 mean faster than eager).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch._higher_order_ops import scan, while_loop

warnings.filterwarnings("ignore", category=FutureWarning)


class GRU(torch.nn.Module):
    """A GRU cell run over a sequence with scan."""

    def __init__(self, d_in=64, d_h=128):
        super().__init__()
        self.wx = torch.nn.Parameter(torch.randn(d_in, 3 * d_h) * d_in**-0.5)
        self.wh = torch.nn.Parameter(torch.randn(d_h, 3 * d_h) * d_h**-0.5)
        self.b = torch.nn.Parameter(torch.zeros(3 * d_h))

    def forward(self, h0, xs):
        def step(h, x):
            gx = x @ self.wx + self.b
            gh = h @ self.wh
            rx, zx, nx = gx.chunk(3, dim=-1)
            rh, zh, nh = gh.chunk(3, dim=-1)
            r = torch.sigmoid(rx + rh)
            z = torch.sigmoid(zx + zh)
            n = torch.tanh(nx + r * nh)
            h = (1 - z) * n + z * h
            return h, h.clone()

        return scan(step, h0, xs)


class FixedPoint(torch.nn.Module):
    """Early stopping: iterate x <- tanh(W x + b) until the update is below tol (data-dependent trip count)."""

    def __init__(self, d=64):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d, d) * 0.5 / d**0.5)
        self.b = torch.nn.Parameter(torch.randn(d) * 0.1)

    def forward(self, x0, tol):
        def cond(i, x, delta):
            return (delta > tol) & (i < 10_000)

        def body(i, x, delta):
            nxt = torch.tanh(x @ self.w + self.b)
            return i + 1, nxt, (nxt - x).abs().max()

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x0, torch.tensor(float("inf"))))


class Clamp(torch.nn.Module):
    """cond: scrub inf/nan only when there are any (the control-flow paper's first use case)."""

    def forward(self, x):
        bad = torch.isnan(x) | torch.isinf(x)
        return torch.cond(bad.any(), lambda t: torch.nan_to_num(t, 0.0, 1e4, -1e4), lambda t: t * 1.0, (x,))


def median_time(fn, args, repeats):
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def max_error(got, expected) -> float:
    leaves_got = torch.utils._pytree.tree_leaves(got)
    leaves_exp = torch.utils._pytree.tree_leaves(expected)
    return max(((g.double() - e.double()).abs().max().item() for g, e in zip(leaves_got, leaves_exp)), default=0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-inductor", action="store_true", help="skip the Inductor column")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(512, 512)
    x[3, 7] = float("nan")
    cases = [
        ("GRU over T=64 steps (scan)", GRU(), (torch.zeros(32, 128), torch.randn(64, 32, 64))),
        ("fixed point, early stop (while_loop)", FixedPoint(), (torch.randn(16, 64), torch.tensor(1e-6))),
        ("inf/nan clamp 512x512 (cond)", Clamp(), (x,)),
    ]
    print(f"{'model':40s} {'max |tidal-eager|':>18s} {'eager ms':>9s} {'inductor ms':>12s} {'tidal ms':>9s} {'tidal vs eager':>15s} {'tidal vs inductor':>18s}")
    with torch.no_grad():
        for name, model, inputs in cases:
            expected = model(*inputs)
            # strict: a graph tidal could not compile must fail the demo, not time eager as tidal
            tidal = torch.compile(model, backend="tidal", options={"fallback": "error"})
            start = time.perf_counter()
            got = tidal(*inputs)
            compile_s = time.perf_counter() - start
            err = max_error(got, expected)
            t_eager = median_time(model, inputs, args.repeats)
            t_tidal = median_time(tidal, inputs, args.repeats)
            inductor_cell, vs_inductor = "skipped", "-"
            if not args.no_inductor:
                try:
                    torch._dynamo.config.capture_scalar_outputs = True
                    inductor = torch.compile(model, backend="inductor")
                    inductor(*inputs)
                    t_ind = median_time(inductor, inputs, args.repeats)
                    inductor_cell, vs_inductor = f"{t_ind * 1e3:.3f}", f"{t_ind / t_tidal:.2f}x"
                except Exception as e:  # Inductor's own failure is a data point, not a crash
                    inductor_cell, vs_inductor = "failed", type(e).__name__
            print(
                f"{name:40s} {err:18.3g} {t_eager * 1e3:9.3f} {inductor_cell:>12s} {t_tidal * 1e3:9.3f} "
                f"{t_eager / t_tidal:14.2f}x {vs_inductor:>18s}   (tidal compile {compile_s:.1f} s)"
            )
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    main()
