"""A small conv denoiser (Conv2d, GroupNorm, SiLU, a Linear on the timestep) applied over a
timestep schedule with scan, as a diffusion sampler does. Convolutions run as ATen calls from
inside the native loop.
"""
import torch
from torch._higher_order_ops import scan


class Denoiser(torch.nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv_in = torch.nn.Conv2d(3, c, 3, padding=1)
        self.norm = torch.nn.GroupNorm(4, c)
        self.time = torch.nn.Linear(1, c)
        self.conv_out = torch.nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x, t):
        h = self.conv_in(x)
        h = torch.nn.functional.silu(self.norm(h) + self.time(t.reshape(1, 1))[:, :, None, None])
        return self.conv_out(h)


class Sampler(torch.nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.denoiser = Denoiser(c)

    def forward(self, x, timesteps):
        def step(x, t):
            x = x - 0.1 * self.denoiser(x, t)
            return x, x.mean()

        return scan(step, x, timesteps)


torch.manual_seed(0)
model = Sampler().eval()
example_inputs = (torch.randn(2, 3, 8, 8), torch.linspace(1.0, 0.1, 6))
