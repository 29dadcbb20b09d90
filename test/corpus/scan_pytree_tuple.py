"""scan with a nested-tuple carry ((pos, vel), t) and tuple xs (force, mass): leapfrog dynamics."""
import torch
from torch._higher_order_ops import scan


class Integrator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dt = torch.nn.Parameter(torch.tensor(0.05))

    def forward(self, pos, vel, force, mass):
        def step(carry, x):
            (p, v), t = carry
            f, m = x
            v = v + self.dt * (f / m - 0.1 * p)
            p = p + self.dt * v
            t = t + self.dt
            return ((p, v), t), (p.clone(), (v * v).sum(-1))

        return scan(step, ((pos, vel), torch.zeros((), device=pos.device)), (force, mass))


torch.manual_seed(0)
model = Integrator()
example_inputs = (torch.randn(4, 3), torch.zeros(4, 3), torch.randn(16, 4, 3), torch.rand(16, 4, 1) + 1.0)
