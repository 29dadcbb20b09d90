# RUN: %python %s | filecheck %s
# associative_scan's rule, O(T) memory: the forward is the scan alone and keeps its results (and
# inputs), no T x T matrix; the adjoint is ONE reverse sequential scan over steps T-1..1 (slices
# [5,3] of the reversed results and inputs) of the combine's VJP, then step 0 is prepended.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import associative_scan

from tidal.autodiff import training_ir


def linear_recurrence(a, b):
    return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, combine_mode="generic")[1]


a, b = (0.5 + torch.rand(6, 3)).requires_grad_(), torch.randn(6, 3, requires_grad=True)
forward, backward = training_ir(linear_recurrence, a, b)
print("// forward")
print(forward)
print("// backward")
print(backward)

# CHECK-LABEL: // forward
# CHECK:       func.func @main(%arg0: !torch.vtensor<[6,3],f32>, %arg1: !torch.vtensor<[6,3],f32>)
# CHECK-SAME:    -> (!torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>)
# CHECK:       "tidal.associative_scan"
# CHECK-NOT:   [6,6]
# CHECK-NOT:   "tidal.scan"
# CHECK-LABEL: // backward
# CHECK-NOT:   [6,6]
# CHECK-COUNT-6: torch.aten.flip {{.+}} -> !torch.vtensor<[5,3],f32>
# CHECK:       %[[ADJ:[0-9]+]]:4 = "tidal.scan"
# CHECK:       num_carries = 2 : i64, num_xs = 6 : i64
# CHECK-SAME:    -> (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>, !torch.vtensor<[5,3],f32>, !torch.vtensor<[5,3],f32>)
# CHECK:       torch.aten.flip %[[ADJ]]#2
# CHECK:       torch.aten.cat {{.+}} -> !torch.vtensor<[6,3],f32>
# CHECK-NOT:   "tidal.scan"
