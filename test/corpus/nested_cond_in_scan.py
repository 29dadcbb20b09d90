"""Nesting: cond inside a scan body — a state reset gate chosen per time step from the input."""
import torch
from torch._higher_order_ops import scan


class ResettingRNN(torch.nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d, d) * 0.3)

    def forward(self, h0, xs):
        def step(h, x):
            def reset(h, x):
                return torch.tanh(x)

            def update(h, x):
                return torch.tanh(h @ self.W + x)

            h = torch.cond(x.sum() < -1.0, reset, update, (h, x))
            return h, h.clone()

        return scan(step, h0, xs)


torch.manual_seed(0)
model = ResettingRNN()
example_inputs = (torch.zeros(6), torch.randn(12, 6))
