"""Power iteration with a while_loop that stops when the eigenvector change norm < tol (closure-
captured matrix).
"""
import torch
from torch._higher_order_ops import while_loop


class PowerIteration(torch.nn.Module):
    def __init__(self, n=6):
        super().__init__()
        a = torch.randn(n, n)
        self.register_buffer("A", a @ a.T + torch.eye(n))

    def forward(self, v0):
        A = self.A

        def cond_fn(v, delta, k):
            return (delta > 1e-5) & (k < 200)

        def body_fn(v, delta, k):
            w = A @ v
            w = w / torch.sqrt((w * w).sum())
            return w, torch.sqrt(((w - v) ** 2).sum()), k + 1

        v, delta, k = while_loop(cond_fn, body_fn, (v0, torch.tensor(1.0, device=v0.device), torch.tensor(0, device=v0.device)))
        eig = (v * (A @ v)).sum()
        return eig, v, k


torch.manual_seed(0)
model = PowerIteration()
example_inputs = (torch.ones(6) / 6**0.5,)
