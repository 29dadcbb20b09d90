"""reverse=True associative_scan with a max combine: suffix maxima (via where)."""
import torch
from torch._higher_order_ops import associative_scan


def suffix_max(x):
    def combine(a, b):
        return torch.where(a > b, a, b)

    return associative_scan(combine, x, dim=0, reverse=True, combine_mode="generic")


torch.manual_seed(0)
model = suffix_max
example_inputs = (torch.randn(17, 5),)
