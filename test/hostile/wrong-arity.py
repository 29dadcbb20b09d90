import torch


def model(x, y):
    return x + y


example_inputs = (torch.randn(3),)
