# RUN: tidal-compile %s --emit ttgir --target cuda:90 2>&1 | filecheck %s
# An RNN of width 96 = 3·32: no [16, 96] tile exists (Triton's shapes are powers of two), so its
# columns are split among 6 programs of 16 each (a multiple of 3, each a power of two), which
# exchange h through L2 every step; U's 96 K rows and the exchanged h sit in shared memory in
# pieces of 32, and each K chunk of 16 is read within one piece. No warning: it is one kernel.

# CHECK-NOT:   warning
# CHECK-LABEL: // kernel tidal_scan_rows_1 (ttgir, cuda:90)
# CHECK:       #mma = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [1, 2], instrShape = [16, 8]}>
# U's share of 16 columns, its TF32 high and low parts for K rows [0, 32), [32, 64), [64, 96), before the loop
# CHECK-COUNT-6: ttg.local_alloc {{.*}} -> !ttg.memdesc<32x16xf32
# CHECK:       scf.for {{.*}} -> (tensor<16x16xf32, #mma>, tensor<16x16xf32, #mma>)
# the exchanged h, back from L2 in pieces of 32 columns
# CHECK-COUNT-3: ttg.local_alloc {{.*}} : (tensor<16x32xf32, #mma>) -> !ttg.memdesc<16x32xf32
# CHECK-NOT:   16x96xf32
import torch
from torch._higher_order_ops import scan


class RNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.u = torch.nn.Parameter(torch.randn(96, 96, generator=g) / 96 ** 0.5)

    def forward(self, h0, xs):
        def step(h, x):
            h = torch.tanh(x + h @ self.u)
            return h, h.clone()

        return scan(step, h0, xs)


model = RNN()
example_inputs = (torch.zeros(32, 96), torch.randn(5, 32, 96))
