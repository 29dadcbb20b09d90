import torch
from torch._higher_order_ops import scan


def model(h, xs):
    return scan(lambda c, x: (c + x, c.clone()), h, xs)


example_inputs = (torch.zeros(3), torch.randn(0, 3))
