# RUN: %python %s | filecheck %s
# associative_scan (generic mode) stays ONE tidal.associative_scan whose combine region takes
# lhs/rhs slices; torch's recursive odd/even expansion (aten.slice + cat) never appears.
# (The permutes around the op are torch's move of `dim` to the front: the identity for dim=0.)
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import associative_scan

from tidal.importer import import_program


def linear_recurrence(a, b):
    def combine(left, right):
        a1, b1 = left
        a2, b2 = right
        return a1 * a2, a2 * b1 + b2

    return associative_scan(combine, (a, b), dim=0, combine_mode="generic")


prog = import_program(linear_recurrence, (torch.rand(8, 4), torch.randn(8, 4)))
print(prog.module)

# CHECK-LABEL: func.func @main
# CHECK-NOT:   aten.slice
# CHECK:       %[[R:.+]]:2 = "tidal.associative_scan"(%{{[^,]+}}, %{{[^)]+}})
# CHECK-NEXT:  ^bb0(%[[A1:[^:]+]]: !torch.vtensor<[4],f32>, %[[B1:[^:]+]]: !torch.vtensor<[4],f32>, %[[A2:[^:]+]]: !torch.vtensor<[4],f32>, %[[B2:[^:]+]]: !torch.vtensor<[4],f32>):
# CHECK-DAG:     %[[AA:.+]] = torch.aten.mul.Tensor %[[A1]], %[[A2]]
# CHECK-DAG:     %[[AB:.+]] = torch.aten.mul.Tensor %[[A2]], %[[B1]]
# CHECK:         %[[S:.+]] = torch.aten.add.Tensor %[[AB]], %[[B2]]
# CHECK:         "tidal.yield"(%[[AA]], %[[S]])
# CHECK:       }) {dim = 0 : i64, num_xs = 2 : i64, reverse = false}
# CHECK-NOT:   "tidal.associative_scan"
# CHECK-NOT:   aten.slice
# CHECK:       torch.aten.permute %[[R]]#0
# CHECK:       torch.aten.permute %[[R]]#1
# CHECK:       return
