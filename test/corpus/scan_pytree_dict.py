"""scan with dict carry and dict xs (pytree leaves), producing a dict of stacked ys."""
import torch
from torch._higher_order_ops import scan


def leaky_integrator(state, inputs):
    def step(c, x):
        v = c["v"] * c["decay"] + x["current"] * x["gain"]
        spike = torch.sigmoid(4.0 * (v - 1.0))
        v = v - spike
        return {"v": v, "decay": c["decay"].clone()}, {"v": v.clone(), "spike": spike}

    return scan(step, state, inputs)


torch.manual_seed(0)
model = leaky_integrator
example_inputs = (
    {"v": torch.zeros(6), "decay": torch.full((6,), 0.8)},
    {"current": torch.rand(14, 6), "gain": torch.rand(14, 6) + 0.5},
)
