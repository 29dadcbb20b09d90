# RUN: %python %s | filecheck %s
# while_loop imports as tidal.while: carries first, then the closure-captured tensor as a const
# operand (num_carries separates them); cond yields the predicate, body yields the carries.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import while_loop

from tidal.importer import import_program


def double_until(x, bound):
    return while_loop(lambda i, y: y.sum() < bound, lambda i, y: (i + 1, y * 2.0), (torch.tensor(0), x))


prog = import_program(double_until, (torch.rand(3) + 0.1, torch.tensor(100.0)))
print(prog.module)

# CHECK-LABEL: func.func @main
# CHECK:       %[[R:.+]]:2 = "tidal.while"(%{{.+}}, %arg0, %arg1) ({
# CHECK-NEXT:  ^bb0(%{{[^:]+}}: !torch.vtensor<[],si64>, %[[Y:[^:]+]]: !torch.vtensor<[3],f32>, %[[B:[^:]+]]: !torch.vtensor<[],f32>):
# CHECK:         %[[S:.+]] = torch.aten.sum{{.*}} %[[Y]]
# CHECK:         %[[P:.+]] = torch.aten.lt.Tensor %[[S]], %[[B]]
# CHECK:         "tidal.yield"(%[[P]]) : (!torch.vtensor<[],i1>) -> ()
# CHECK:       }, {
# CHECK:         "tidal.yield"(%{{.+}}, %{{.+}}) : (!torch.vtensor<[],si64>, !torch.vtensor<[3],f32>) -> ()
# CHECK:       }) {num_carries = 2 : i64} : (!torch.vtensor<[],si64>, !torch.vtensor<[3],f32>, !torch.vtensor<[],f32>) -> (!torch.vtensor<[],si64>, !torch.vtensor<[3],f32>)
