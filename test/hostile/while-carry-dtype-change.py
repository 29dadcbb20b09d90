import torch
from torch._higher_order_ops import while_loop


def model(i, x):
    return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x.double()), (i, x))


example_inputs = (torch.tensor(0), torch.randn(4))
