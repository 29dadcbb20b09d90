"""GRU cell over a sequence via scan (paper use case): gates from captured nn.Parameters."""
import torch
from torch._higher_order_ops import scan


class GRU(torch.nn.Module):
    def __init__(self, d_in=4, d_h=8):
        super().__init__()
        self.Wx = torch.nn.Parameter(torch.randn(d_in, 3 * d_h) * 0.3)
        self.Wh = torch.nn.Parameter(torch.randn(d_h, 3 * d_h) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(3 * d_h) * 0.1)
        self.d_h = d_h

    def forward(self, h0, xs):
        d = self.d_h

        def step(h, x):
            gx = x @ self.Wx + self.b
            gh = h @ self.Wh
            r = torch.sigmoid(gx[:, :d] + gh[:, :d])
            z = torch.sigmoid(gx[:, d : 2 * d] + gh[:, d : 2 * d])
            n = torch.tanh(gx[:, 2 * d :] + r * gh[:, 2 * d :])
            h = (1 - z) * n + z * h
            return h, h.clone()

        return scan(step, h0, xs)


torch.manual_seed(0)
model = GRU()
example_inputs = (torch.zeros(3, 8), torch.randn(12, 3, 4))
