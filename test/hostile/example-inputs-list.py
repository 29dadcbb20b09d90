import torch


def model(x):
    return x.sin()


example_inputs = [torch.randn(3)]  # a list, not a tuple
