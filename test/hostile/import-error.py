import torch
import tidal_no_such_module_xyz  # noqa

model = torch.sin
example_inputs = (torch.randn(3),)
