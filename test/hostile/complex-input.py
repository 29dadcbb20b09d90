import torch


def model(x):
    return x * 2


example_inputs = (torch.randn(4, dtype=torch.complex64),)
