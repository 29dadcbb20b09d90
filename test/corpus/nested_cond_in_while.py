"""Nesting: cond inside a while_loop body — each iteration picks one of two damped updates toward a
target; stops when converged.
"""
import torch
from torch._higher_order_ops import while_loop


def damped_iteration(x, target):
    def cond_fn(it, y):
        return (it < 50) & ((y - target).abs().amax() > 1e-2)

    def body_fn(it, y):
        err = (y - target).mean()

        def overshoot(y, target):
            return y - 0.5 * (y - target)

        def undershoot(y, target):
            return y + 0.25 * (target - y)

        return it + 1, torch.cond(err > 0, overshoot, undershoot, (y, target))

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64, device=x.device), x))


torch.manual_seed(0)
model = damped_iteration
example_inputs = (torch.randn(4, 3) * 3, torch.randn(4, 3))
