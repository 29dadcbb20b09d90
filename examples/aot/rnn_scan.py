"""An RNN over a sequence of any length (`scan`): h_t = tanh(x_t W + h_{t-1} U + b).

Exported with its length dynamic: one library serves every T.
"""
import torch
from torch._higher_order_ops import scan


class RNN(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.W = torch.nn.Parameter(torch.randn(d, d, generator=g) / d**0.5)
        self.U = torch.nn.Parameter(torch.randn(d, d, generator=g) / d**0.5)
        self.b = torch.nn.Parameter(torch.zeros(d))

    def forward(self, h0, xs):
        def step(h, x):
            h = torch.tanh(x @ self.W + h @ self.U + self.b)
            return h, h.clone()

        return scan(step, h0, xs)


model = RNN()
example_inputs = (torch.zeros(4, 16), torch.randn(12, 4, 16, generator=torch.Generator().manual_seed(1)))
dynamic_shapes = (None, {0: torch.export.Dim("T", min=2, max=1 << 20)})
# what examples/aot/example_io.py writes for the C example: another length than the export's
check_inputs = (torch.zeros(4, 16), torch.randn(37, 4, 16, generator=torch.Generator().manual_seed(4)))
