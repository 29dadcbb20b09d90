"""Top-level pytrees: the model takes a tuple and a dict and returns a dict (scan + cond inside)."""
import torch
from torch._higher_order_ops import scan


class Model(torch.nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d, d) * 0.4)

    def forward(self, pair, cfg):
        xs, h0 = pair

        def step(h, x):
            h = torch.tanh(h @ self.W + x * cfg["gain"])
            return h, h.clone()

        h, hs = scan(step, h0, xs)
        out = torch.cond(h.sum() > 0, lambda a: a * 2.0, lambda a: -a, (h,))
        return {"final": out, "states": hs, "mean": hs.mean(0)}


torch.manual_seed(0)
model = Model()
example_inputs = ((torch.randn(8, 2, 4), torch.zeros(2, 4)), {"gain": torch.tensor(0.7)})
