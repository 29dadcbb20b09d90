"""Deep-equilibrium fixed point z = tanh(z W + x U) iterated in a while_loop until the residual < tol;
nn.Parameters captured in the body.
"""
import torch
from torch._higher_order_ops import while_loop


class DEQ(torch.nn.Module):
    def __init__(self, d_in=4, d=8):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d, d) * 0.1)
        self.U = torch.nn.Parameter(torch.randn(d_in, d) * 0.5)
        self.d = d

    def forward(self, x):
        inj = x @ self.U

        def cond_fn(z, res, it):
            return (res > 1e-6) & (it < 100)

        def body_fn(z, res, it):
            z_new = torch.tanh(z @ self.W + inj)
            return z_new, (z_new - z).abs().amax(), it + 1

        z0 = torch.zeros(x.shape[0], self.d, device=x.device)
        z, res, it = while_loop(cond_fn, body_fn, (z0, torch.tensor(1.0, device=x.device), torch.tensor(0, device=x.device)))
        return z, it


torch.manual_seed(0)
model = DEQ()
example_inputs = (torch.randn(3, 4),)
