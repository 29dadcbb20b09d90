# RUN: tidal-compile %s --emit ttir --target cuda:90 | filecheck %s
# A long elementwise associative_scan (a linear recurrence over [1M, 16] f32) is ONE kernel with a
# decoupled look-back: each program takes a ticket from an atomic counter, scans its register tile
# (each thread's run of rows first, then the runs' totals across threads), publishes the tile's
# total (values, a barrier, a release flag), looks back over a window of earlier chunks' flags
# (acquire atomics) combined by a segmented tt.scan, publishes its inclusive prefix and stores.
# Compiled by Triton for sm_90 on a machine without a GPU.
import torch
from torch._higher_order_ops import associative_scan


class LinearRecurrence(torch.nn.Module):
    def forward(self, a, b):
        def combine(left, right):
            return left[0] * right[0], right[0] * left[1] + right[1]

        return associative_scan(combine, (a, b), dim=0, combine_mode="generic")[1]


model = LinearRecurrence()
example_inputs = (torch.rand(1 << 20, 16), torch.randn(1 << 20, 16))

# CHECK-LABEL: // kernel tidal_scan_1_lookback (ttir, cuda:90)
# CHECK:       tt.func public @tidal_scan_1_lookback(
# CHECK:       %[[TICKET:.+]] = tt.atomic_rmw add, acq_rel, gpu, %{{.+}}, %c1_i32
# CHECK:       "tt.scan"({{.*}}) <{axis = 1 : i32, reverse = false}>
# CHECK:       "tt.scan"({{.*}}) <{axis = 0 : i32, reverse = false}>
# CHECK:       gpu.barrier
# CHECK-NEXT:  tt.addptr %{{.+}}, %[[TICKET]]
# CHECK-NEXT:  tt.atomic_rmw exch, release, gpu, %{{.+}}, %c1_i32
# CHECK:       scf.while
# CHECK:       tt.atomic_rmw add, acquire, gpu, %{{.+}} : (tensor<32x!tt.ptr<i32>>
# CHECK:       "tt.scan"({{.*}}) <{axis = 0 : i32, reverse = false}>
# CHECK:       gpu.barrier
# CHECK:       tt.atomic_rmw exch, release, gpu, %{{.+}}, %c2_i32
# CHECK:       tt.store %{{.+}} : tensor<32x16x16x!tt.ptr<f32>>
# CHECK-NOT:   // kernel
