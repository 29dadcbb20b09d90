# RUN: %python %s | filecheck %s
# scan's rule: the forward stacks the carry entering each step (one more scan result); the adjoint is
# ONE scan over the reversed steps carrying the carry's cotangent and the weight's accumulator,
# applying the step's VJP to what the forward kept (no contraction of the forward is repeated).
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import scan

from tidal.dynamo import training_ir


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
# tanh's VJP reads the carry leaving each step: nothing of the forward is recomputed and nothing
# more is kept. That carry is the next step's entering one: it travels through the reverse scan as
# a third carry, started from the final carry (the function's argument %arg2 here) and handed each
# step's entering carry.
# CHECK:       func.func @main(%{{.+}}, %[[ENTERING:[a-zA-Z0-9_]+]]: !torch.vtensor<[4,2,3],f32>, %[[FINAL:[a-zA-Z0-9_]+]]: !torch.vtensor<[2,3],f32>,
# CHECK-NOT:   torch.aten.cat
# CHECK:       %[[LEAVING_LAST:[a-zA-Z0-9_#]+]] = torch.aten.alias %[[FINAL]]
# CHECK:       %[[ENTERING_REV:[a-zA-Z0-9_#]+]] = torch.aten.flip %[[ENTERING]]
# CHECK:       %[[ADJ:[a-zA-Z0-9_#]+]]:4 = "tidal.scan"(%{{.+}}, %{{.+}}, %[[LEAVING_LAST]], %[[ENTERING_REV]],
# CHECK-NEXT:  ^bb0(%[[GC:[a-zA-Z0-9_#]+]]: !torch.vtensor<[2,3],f32>, %[[GW:[a-zA-Z0-9_#]+]]: !torch.vtensor<[3,3],f32>, %[[LEAVING:[a-zA-Z0-9_#]+]]: !torch.vtensor<[2,3],f32>, %[[C:[a-zA-Z0-9_#]+]]: !torch.vtensor<[2,3],f32>,
# CHECK-NOT:     torch.aten.tanh
# CHECK-NOT:     torch.aten.mm
# CHECK:         torch.aten.alias %[[LEAVING]]
# CHECK:         torch.aten.mul.Tensor
# CHECK:         %[[C_T:[a-zA-Z0-9_#]+]] = torch.aten.permute %[[C]]
# CHECK:         %[[STEP_GW:[a-zA-Z0-9_#]+]] = torch.aten.mm %[[C_T]]
# CHECK:         %[[GC_PREV:[a-zA-Z0-9_#]+]] = torch.aten.mm
# CHECK:         %[[HANDED:[a-zA-Z0-9_#]+]] = torch.aten.clone %[[C]]
# CHECK:         %[[ACC:[a-zA-Z0-9_#]+]] = torch.aten.add.Tensor %[[GW]], %[[STEP_GW]]
# CHECK:         "tidal.yield"(%[[GC_PREV]], %[[ACC]], %[[HANDED]], %{{.+}})
# CHECK:       num_carries = 3 : i64, num_xs = 2 : i64
# CHECK:       %[[GXS:[a-zA-Z0-9_#]+]] = torch.aten.flip %[[ADJ]]#3
# CHECK:       return %[[GXS]], %[[ADJ]]#1
