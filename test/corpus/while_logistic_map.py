"""while_loop whose body is elementwise and whose condition reads only a 0-d counter: n steps of the
logistic map x <- r x (1 - x) on every element (the trip count an input tensor). On a GPU the whole
loop is one kernel (scf.while inside), with no host round trip per iteration.
"""
import torch
from torch._higher_order_ops import while_loop


def logistic_map(x, r, n):
    def cond_fn(i, y):
        return i < n

    def body_fn(i, y):
        return i + 1, r * y * (1.0 - y)

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64, device=x.device), x))


torch.manual_seed(0)
model = logistic_map
example_inputs = (torch.rand(1000) * 0.9 + 0.05, torch.rand(1000) * 0.5 + 2.5, torch.tensor(25, dtype=torch.int64))
