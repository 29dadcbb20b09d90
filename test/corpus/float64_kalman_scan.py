"""float64 program: scalar-per-channel Kalman filter over a sequence with scan (mean and variance carries)."""
import torch
from torch._higher_order_ops import scan


def kalman(obs, q, r):
    def step(carry, z):
        m, p = carry
        p_pred = p + q
        k = p_pred / (p_pred + r)
        m = m + k * (z - m)
        p = (1 - k) * p_pred
        return (m, p), (m.clone(), p.clone())

    init = (torch.zeros_like(obs[0]), torch.ones_like(obs[0]))
    return scan(step, init, obs)


torch.manual_seed(0)
model = kalman
example_inputs = (
    torch.randn(18, 5, dtype=torch.float64),
    torch.full((5,), 0.01, dtype=torch.float64),
    torch.full((5,), 0.5, dtype=torch.float64),
)
