import torch

example_inputs = (torch.randn(3),)
