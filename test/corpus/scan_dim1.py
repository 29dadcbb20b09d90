"""scan over dim=1 (batch-first sequences): exponential moving average with a learned decay."""
import torch
from torch._higher_order_ops import scan


class EMA(torch.nn.Module):
    def __init__(self, d=5):
        super().__init__()
        self.logit = torch.nn.Parameter(torch.randn(d))

    def forward(self, xs):
        alpha = torch.sigmoid(self.logit)
        init = torch.zeros(xs.shape[0], xs.shape[2], device=xs.device)

        def step(m, x):
            m = alpha * m + (1 - alpha) * x
            return m, m.clone()

        return scan(step, init, xs, dim=1)


torch.manual_seed(0)
model = EMA()
example_inputs = (torch.randn(3, 11, 5),)
