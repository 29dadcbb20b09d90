import torch


def model(x):
    return x.sin()


example_inputs = "not a tuple of tensors"
