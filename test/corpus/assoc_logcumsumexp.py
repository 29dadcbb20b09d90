"""associative_scan with a log-add-exp combine: numerically stable logcumsumexp in float64."""
import torch
from torch._higher_order_ops import associative_scan


def logcumsumexp(x):
    def combine(a, b):
        m = torch.maximum(a, b)
        return m + torch.log(torch.exp(a - m) + torch.exp(b - m))

    return associative_scan(combine, x, dim=0, combine_mode="generic")


torch.manual_seed(0)
model = logcumsumexp
example_inputs = (torch.randn(12, 6, dtype=torch.float64),)
