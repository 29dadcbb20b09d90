"""Nesting 3 levels deep: scan -> while_loop -> cond (per step, an inner loop whose body branches on
the data).
"""
import torch
from torch._higher_order_ops import scan, while_loop


def clipped_accumulate(xs, limit):
    def step(acc, x):
        def cond_fn(k, v):
            return (k < 10) & (v.abs().sum() > 2e-2)

        def body_fn(k, v):
            def big(v, limit):
                return v.clamp(-limit, limit) * 0.5

            def small(v, limit):
                return v * 0.5

            return k + 1, torch.cond(v.abs().amax() > limit, big, small, (v, limit))

        k, v = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64, device=x.device), x.clone()))
        acc = acc + v
        return acc, k.clone()

    return scan(step, torch.zeros_like(xs[0]), xs)


torch.manual_seed(0)
model = clipped_accumulate
example_inputs = (torch.randn(7, 4) * 1.5, torch.tensor(1.0))
