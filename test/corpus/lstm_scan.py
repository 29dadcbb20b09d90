"""LSTM cell over a sequence via scan (paper use case): tuple carry (h, c), two stacked outputs."""
import torch
from torch._higher_order_ops import scan


class LSTM(torch.nn.Module):
    def __init__(self, d_in=4, d_h=6):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d_in, 4 * d_h) * 0.3)
        self.U = torch.nn.Parameter(torch.randn(d_h, 4 * d_h) * 0.3)
        self.b = torch.nn.Parameter(torch.zeros(4 * d_h))
        self.d_h = d_h

    def forward(self, h0, c0, xs):
        d = self.d_h

        def step(carry, x):
            h, c = carry
            g = x @ self.W + h @ self.U + self.b
            i = torch.sigmoid(g[:, :d])
            f = torch.sigmoid(g[:, d : 2 * d])
            o = torch.sigmoid(g[:, 2 * d : 3 * d])
            u = torch.tanh(g[:, 3 * d :])
            c = f * c + i * u
            h = o * torch.tanh(c)
            return (h, c), (h.clone(), c.clone())

        (h, c), (hs, cs) = scan(step, (h0, c0), xs)
        return h, c, hs, cs


torch.manual_seed(0)
model = LSTM()
example_inputs = (torch.zeros(2, 6), torch.zeros(2, 6), torch.randn(9, 2, 4))
