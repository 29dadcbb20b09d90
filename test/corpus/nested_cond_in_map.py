"""Nesting: cond inside a map body — each mapped row picks a branch from its own values."""
import torch
from torch._higher_order_ops import map


def rowwise_normalize(xs, eps):
    def f(row, eps):
        n = torch.sqrt((row * row).sum())

        def normalize(row, n):
            return row / n

        def keep(row, n):
            return row * 1.0

        return torch.cond(n > eps, normalize, keep, (row, n))

    return map(f, xs, eps)


torch.manual_seed(0)
model = rowwise_normalize
_x = torch.randn(6, 4)
_x[2] = 0.01
example_inputs = (_x, torch.tensor(0.5))
