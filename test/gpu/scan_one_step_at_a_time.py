# RUN: tidal-compile %s --emit ttir --target cuda:90 2>&1 >/dev/null | filecheck %s
# An RNN of width 100 (4·25: no power-of-two share) has no persistent row kernel yet: the GPU runs its scan
# one step at a time, and compiling it says so, once, at the scan's line, as a diagnostic.

# CHECK:     scan_one_step_at_a_time.py:23:{{[0-9]+}}: warning: tidal runs this scan on the GPU one step at a time
# CHECK-SAME: its carries' widths [100] are neither powers of two of at least 16 nor multiples of 16 with an odd factor of at most 7
# CHECK-NOT: warning
# CHECK-NOT: Traceback
import torch
from torch._higher_order_ops import scan


class RNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.u = torch.nn.Parameter(torch.randn(100, 100) / 10)

    def forward(self, h0, xs):
        def step(h, x):
            h = torch.tanh(x + h @ self.u)
            return h, h.clone()

        return scan(step, h0, xs)


model = RNN()
example_inputs = (torch.zeros(8, 100), torch.randn(5, 8, 100))
