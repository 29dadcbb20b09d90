import torch


def model(x):
    x.sin()


example_inputs = (torch.randn(3),)
