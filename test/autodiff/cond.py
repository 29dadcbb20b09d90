# RUN: %python %s | filecheck %s
# cond's rule: the forward cond keeps its operands and predicate as residuals; the adjoint is ONE
# cond on the same predicate whose branches are the branches' VJPs. The false branch's gradient
# for w is expanded (d(x * w.sum())/dw) and made contiguous, so both branches yield alike.
import warnings

warnings.filterwarnings("ignore")

import torch

from tidal.dynamo import training_ir


def branchy(p, x, w):
    return torch.cond(p.sum() > 0, lambda x, w: torch.sin(x @ w), lambda x, w: x.exp() * w.sum(), (x, w))


forward, backward = training_ir(branchy, torch.ones(2), torch.randn(2, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True))
print("// forward")
print(forward)
print("// backward")
print(backward)

# CHECK-LABEL: // forward
# CHECK:       %[[PRED:[0-9]+]] = torch.aten.gt.Scalar
# CHECK:       %[[OUT:[0-9]+]] = "tidal.cond"(%[[PRED]],
# CHECK:       return %[[OUT]], %arg1, %arg2, %[[PRED]]
# CHECK-LABEL: // backward
# CHECK:       func.func @main({{.+}}, %[[P:arg[0-9]+]]: !torch.vtensor<[],i1>
# CHECK:       %[[G:[0-9]+]]:2 = "tidal.cond"(%[[P]],
# CHECK:         torch.aten.cos
# CHECK:         "tidal.yield"
# CHECK:         torch.aten.exp
# CHECK:         torch.aten.clone
# CHECK:         "tidal.yield"
# CHECK:       return %[[G]]#1, %[[G]]#0
