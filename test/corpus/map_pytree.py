"""map with tuple xs and a dict result: per-row statistics of two mapped tensors."""
import torch
from torch._higher_order_ops import map


class RowStats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor([1.5, -0.5, 2.0, 1.0]))

    def forward(self, a, b):
        def f(ab):
            x, y = ab
            z = x * self.scale + y
            return {"mean": z.mean(-1), "max": z.amax(-1), "normed": z - z.mean(-1, keepdim=True)}

        return map(f, (a, b))


torch.manual_seed(0)
model = RowStats()
example_inputs = (torch.randn(7, 2, 4), torch.randn(7, 2, 4))
