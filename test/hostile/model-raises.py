import torch


def model(x):
    raise ValueError("the model refuses to run")


example_inputs = (torch.randn(3),)
