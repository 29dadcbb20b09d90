# RUN: %python %s | filecheck %s
# scan imports as one tidal.scan: carries and xs counted in attributes, a body ending in tidal.yield.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import scan

from tidal.importer import import_program


def cumulative(init, xs):
    def step(carry, x):
        carry = carry + x
        return carry, carry * 2.0

    return scan(step, init, xs)


prog = import_program(cumulative, (torch.zeros(3), torch.randn(5, 3)))
print(prog.module)

# CHECK-LABEL: func.func @main
# CHECK-SAME:    %[[INIT:.+]]: !torch.vtensor<[3],f32>, %[[XS:.+]]: !torch.vtensor<[5,3],f32>
# CHECK:       %[[R:.+]]:2 = "tidal.scan"(%[[INIT]], %[[XS]])
# CHECK-NEXT:  ^bb0(%[[C:.+]]: !torch.vtensor<[3],f32>, %[[X:.+]]: !torch.vtensor<[3],f32>):
# CHECK:         %[[NEXT:.+]] = torch.aten.add.Tensor %[[C]], %[[X]]
# CHECK:         %[[Y:.+]] = torch.aten.mul.Scalar %[[NEXT]]
# CHECK:         "tidal.yield"(%[[NEXT]], %[[Y]])
# CHECK:       }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false}
# CHECK-SAME:    -> (!torch.vtensor<[3],f32>, !torch.vtensor<[5,3],f32>)
# CHECK:       return %[[R]]#0, %[[R]]#1
