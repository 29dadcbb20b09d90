import torch


def model(x):
    return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x[:2].cos(), (x,))


example_inputs = (torch.randn(4),)
