"""scan with an int64 counter carry next to float carries: counts threshold crossings and tracks a
running mean.
"""
import torch
from torch._higher_order_ops import scan


def count_crossings(xs, threshold):
    def step(carry, x):
        count, total, prev = carry
        crossed = (x > threshold) & (prev <= threshold)
        count = count + crossed.to(torch.int64)
        total = total + x
        return (count, total, x.clone()), count.clone()

    d = xs.shape[1]
    init = (torch.zeros(d, dtype=torch.int64, device=xs.device), torch.zeros(d, device=xs.device), torch.full((d,), -1e9, device=xs.device))
    (count, total, _), counts = scan(step, init, xs)
    return count, total / xs.shape[0], counts


torch.manual_seed(0)
model = count_crossings
example_inputs = (torch.randn(20, 6), torch.tensor(0.5))
