"""S5-style diagonal linear recurrence h_t = a_t*h_{t-1} + b_t via associative_scan (paper use case)."""
import torch
from torch._higher_order_ops import associative_scan


class S5Layer(torch.nn.Module):
    def __init__(self, d_in=4, d_state=8):
        super().__init__()
        self.log_decay = torch.nn.Parameter(torch.randn(d_state) * 0.5)
        self.B = torch.nn.Parameter(torch.randn(d_in, d_state) * 0.3)
        self.C = torch.nn.Parameter(torch.randn(d_state, d_in) * 0.3)

    def forward(self, u):
        # u: [T, d_in]; a_t = exp(-softplus-ish decay) broadcast over time, b_t = u_t B
        a = torch.exp(-torch.exp(self.log_decay)) * torch.ones(u.shape[0], 1, device=u.device)
        b = u @ self.B

        def combine(left, right):
            a1, b1 = left
            a2, b2 = right
            return a1 * a2, a2 * b1 + b2

        _, h = associative_scan(combine, (a, b), dim=0, combine_mode="generic")
        return h @ self.C


torch.manual_seed(0)
model = S5Layer()
example_inputs = (torch.randn(16, 4),)
