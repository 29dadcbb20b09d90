import torch

model = 42
example_inputs = (torch.randn(3),)
