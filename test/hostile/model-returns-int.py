import torch


def model(x):
    return 3


example_inputs = (torch.randn(3),)
