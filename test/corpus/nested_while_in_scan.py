"""Nesting: while_loop inside a scan body — per time step, refine the state with an inner fixed-point
loop until converged.
"""
import torch
from torch._higher_order_ops import scan, while_loop


class ImplicitRNN(torch.nn.Module):
    def __init__(self, d=5):
        super().__init__()
        # A buffer: a requires_grad Parameter makes scan trace autograd through the inner while_loop,
        # which torch 2.13 rejects ("outs_to_grad length != tangents length").
        self.register_buffer("W", torch.randn(d, d) * 0.15)

    def forward(self, h0, xs):
        W = self.W

        def step(h, x):
            def cond_fn(z, res, k):
                return (res > 1e-5) & (k < 25)

            def body_fn(z, res, k):
                z_new = torch.tanh(z @ W + x + 0.5 * h)
                return z_new, (z_new - z).abs().amax(), k + 1

            z, _, iters = while_loop(cond_fn, body_fn, (h.clone(), torch.ones((), device=h.device), torch.zeros((), dtype=torch.int64, device=h.device)))
            return z, iters.clone()

        return scan(step, h0, xs)


torch.manual_seed(0)
model = ImplicitRNN()
example_inputs = (torch.zeros(3, 5), torch.randn(8, 3, 5))
