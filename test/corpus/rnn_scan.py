"""Elman RNN over a sequence via scan: h_t = tanh(x_t W + h U + b)."""
import torch
from torch._higher_order_ops import scan


class RNN(torch.nn.Module):
    def __init__(self, d_in=4, d_h=8):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d_in, d_h) * 0.3)
        self.U = torch.nn.Parameter(torch.randn(d_h, d_h) * 0.3)
        self.b = torch.nn.Parameter(torch.zeros(d_h))

    def forward(self, h0, xs):
        def step(h, x):
            h = torch.tanh(x @ self.W + h @ self.U + self.b)
            return h, h.clone()

        return scan(step, h0, xs)


torch.manual_seed(0)
model = RNN()
example_inputs = (torch.zeros(2, 8), torch.randn(10, 2, 4))
