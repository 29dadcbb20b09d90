# RUN: %python %s | filecheck %s
# scan's rule: the forward stacks the carry entering each step (one more scan result, and the only
# residual besides the inputs); the adjoint is ONE scan over the reversed steps carrying the carry's
# cotangent and the weight's accumulator, recomputing the step and applying its VJP.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import scan

from tidal.autodiff import training_ir


def rnn(h0, xs, w):
    def step(h, x):
        h = torch.tanh(x + h @ w)
        return h, h * 2.0

    return scan(step, h0, xs)


forward, backward = training_ir(rnn, torch.zeros(2, 3), torch.randn(4, 2, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True))
print("// forward")
print(forward)
print("// backward")
print(backward)

# CHECK-LABEL: // forward
# CHECK:       %[[FWD:[a-zA-Z0-9_#]+]]:3 = "tidal.scan"
# CHECK:         %[[ENTERING:[a-zA-Z0-9_#]+]] = torch.aten.clone %arg3
# CHECK:         "tidal.yield"(%{{.+}}, %{{.+}}, %[[ENTERING]])
# CHECK:       num_carries = 1 : i64, num_xs = 1 : i64
# CHECK-SAME:    -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[4,2,3],f32>, !torch.vtensor<[4,2,3],f32>)
# CHECK:       return %[[FWD]]#0, %[[FWD]]#1, {{.*}}%[[FWD]]#2
# CHECK-LABEL: // backward
# CHECK:       %[[REV:[a-zA-Z0-9_#]+]] = torch.aten.flip
# CHECK:       %[[ADJ:[a-zA-Z0-9_#]+]]:3 = "tidal.scan"
# CHECK-NEXT:  ^bb0(%[[GC:[a-zA-Z0-9_#]+]]: !torch.vtensor<[2,3],f32>, %[[GW:[a-zA-Z0-9_#]+]]: !torch.vtensor<[3,3],f32>, %[[C:[a-zA-Z0-9_#]+]]: !torch.vtensor<[2,3],f32>,
# CHECK:         torch.aten.mm %[[C]]
# CHECK:         torch.aten.tanh
# CHECK:         %[[STEP_GW:[a-zA-Z0-9_#]+]] = torch.aten.mm
# CHECK:         %[[GC_PREV:[a-zA-Z0-9_#]+]] = torch.aten.mm
# CHECK:         %[[ACC:[a-zA-Z0-9_#]+]] = torch.aten.add.Tensor %[[GW]], %[[STEP_GW]]
# CHECK:         "tidal.yield"(%[[GC_PREV]], %[[ACC]], %{{.+}})
# CHECK:       num_carries = 2 : i64, num_xs = 3 : i64
# CHECK:       %[[GXS:[a-zA-Z0-9_#]+]] = torch.aten.flip %[[ADJ]]#2
# CHECK:       return %[[GXS]], %[[ADJ]]#1
