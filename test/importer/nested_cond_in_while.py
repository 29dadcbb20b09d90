# RUN: %python %s | filecheck %s
# Nesting: a cond inside a while_loop body imports as tidal.cond inside tidal.while's body region.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import while_loop

from tidal.importer import import_program


def halve_or_double(x):
    def cond_fn(i, y):
        return i < 5

    def body_fn(i, y):
        y = torch.cond(y.sum() > 1.0, lambda t: t * 0.5, lambda t: t * 2.0, (y,))
        return i + 1, y

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


prog = import_program(halve_or_double, (torch.randn(4),))
print(prog.module)

# CHECK-LABEL: func.func @main
# CHECK:       %[[W:.+]]:2 = "tidal.while"
# CHECK-NEXT:  ^bb0(%[[I:[^:]+]]: !torch.vtensor<[],si64>, %[[Y:[^:]+]]: !torch.vtensor<[4],f32>):
# CHECK:         torch.aten.lt.Scalar %[[I]]
# CHECK:         "tidal.yield"
# CHECK:       }, {
# CHECK-NEXT:  ^bb0(%[[BI:[^:]+]]: !torch.vtensor<[],si64>, %[[BY:[^:]+]]: !torch.vtensor<[4],f32>):
# CHECK:         %[[P:.+]] = torch.aten.gt.Scalar
# CHECK:         %[[C:.+]] = "tidal.cond"(%[[P]], %[[BY]])
# CHECK:           "tidal.yield"
# CHECK:         }, {
# CHECK:           "tidal.yield"
# CHECK:         })
# CHECK:         "tidal.yield"({{.*}}, %[[C]])
# CHECK:       }) {num_carries = 2 : i64}
# CHECK:       return %[[W]]#0, %[[W]]#1
