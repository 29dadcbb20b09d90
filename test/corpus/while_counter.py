"""while_loop with an int64 counter carried next to a float tensor; trip count n is an input tensor
(periodic smoothing).
"""
import torch
from torch._higher_order_ops import while_loop


def repeated_smoothing(x, n):
    def cond_fn(i, y):
        return i < n

    def body_fn(i, y):
        left = torch.cat([y[-1:], y[:-1]], 0)
        right = torch.cat([y[1:], y[:1]], 0)
        y = 0.5 * y + 0.25 * (left + right)
        return i + 1, y

    i, y = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64, device=x.device), x))
    return i, y


torch.manual_seed(0)
model = repeated_smoothing
example_inputs = (torch.randn(10, 3), torch.tensor(7, dtype=torch.int64))
