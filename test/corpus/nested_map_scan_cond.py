"""Nesting 3 levels deep: map -> scan -> cond (per sequence in a batch, a recurrence whose step
branches on the data).
"""
import torch
from torch._higher_order_ops import map, scan


class BatchedGatedRecurrence(torch.nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(d, d) * 0.4)

    def forward(self, seqs):
        # seqs: [B, T, d]; map over B, scan over T inside
        def per_sequence(xs):
            def step(h, x):
                def grow(h, x):
                    return torch.tanh(h @ self.W + x)

                def decay(h, x):
                    return 0.5 * h

                h = torch.cond(x.mean() > 0, grow, decay, (h, x))
                return h, h.sum().reshape(1)

            return scan(step, torch.zeros(xs.shape[1], device=xs.device), xs)

        return map(per_sequence, seqs)


torch.manual_seed(0)
model = BatchedGatedRecurrence()
example_inputs = (torch.randn(3, 10, 4),)
