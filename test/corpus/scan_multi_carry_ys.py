"""scan with three carries (running sum, running max, count) and three ys per step."""
import torch
from torch._higher_order_ops import scan


def running_stats(xs):
    def step(carry, x):
        s, m, n = carry
        s = s + x
        m = torch.maximum(m, x)
        n = n + 1.0
        mean = s / n
        return (s, m, n), (mean, m.clone(), x - mean)

    d = xs.shape[1:]
    init = (torch.zeros(d, device=xs.device), torch.full(d, -1e30, device=xs.device), torch.zeros(d, device=xs.device))
    return scan(step, init, xs)


torch.manual_seed(0)
model = running_stats
example_inputs = (torch.randn(10, 2, 3),)
