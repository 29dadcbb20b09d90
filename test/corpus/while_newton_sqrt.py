"""Data-dependent trip count in float64: Newton's method for sqrt until max |y^2 - a| < tol."""
import torch
from torch._higher_order_ops import while_loop


def newton_sqrt(a):
    def cond_fn(y, it):
        return ((y * y - a).abs().amax() > 1e-10) & (it < 50)

    def body_fn(y, it):
        return 0.5 * (y + a / y), it + 1

    y0 = a.clone() + 1.0
    return while_loop(cond_fn, body_fn, (y0, torch.zeros((), dtype=torch.int64, device=a.device)))


torch.manual_seed(0)
model = newton_sqrt
example_inputs = (torch.rand(8, dtype=torch.float64) * 10 + 0.1,)
