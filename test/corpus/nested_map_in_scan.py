"""Nesting: map inside a scan body — at each time step, apply a per-particle update mapped over particles."""
import torch
from torch._higher_order_ops import map, scan


def particles(state, drives, w):
    def step(s, d):
        def per_particle(p, d, w):
            return torch.tanh(p @ w) + 0.1 * d

        s = map(per_particle, s, d, w)
        return s, s.sum(0)

    return scan(step, state, drives)


torch.manual_seed(0)
model = particles
example_inputs = (torch.randn(5, 3), torch.randn(10, 3), torch.randn(3, 3) * 0.5)
