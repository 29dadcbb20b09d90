# RUN: %python %s | filecheck %s
# map's rule: the adjoint is ONE map of the body's VJP over (xs, cotangents); the weight's
# per-row cotangents come back stacked and are summed over the mapped dim.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import map as hop_map

from tidal.dynamo import training_ir


def per_row(xs, w):
    return hop_map(lambda x, w: torch.tanh(x @ w), xs, w)


forward, backward = training_ir(per_row, torch.randn(4, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True))
print("// forward")
print(forward)
print("// backward")
print(backward)

# CHECK-LABEL: // forward
# CHECK:       "tidal.map"
# CHECK-LABEL: // backward
# CHECK:       %[[G:[0-9]+]]:2 = "tidal.map"
# CHECK:         torch.aten.tanh
# CHECK:       -> (!torch.vtensor<[4,3],f32>, !torch.vtensor<[4,3,2],f32>)
# CHECK:       torch.aten.sum.dim_IntList %[[G]]#1
