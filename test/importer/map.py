# RUN: %python %s | filecheck %s
# map imports as tidal.map over dim 0: the body sees one row; the extra argument is a const.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import map as hop_map

from tidal.importer import import_program


def scale_rows(xs, w):
    return hop_map(lambda row, w: (row * w).sum(), xs, w)


prog = import_program(scale_rows, (torch.randn(6, 3), torch.randn(3)))
print(prog.module)

# CHECK-LABEL: func.func @main
# CHECK:       "tidal.map"(%arg0, %arg1) ({
# CHECK-NEXT:  ^bb0(%[[ROW:[^:]+]]: !torch.vtensor<[3],f32>, %[[W:[^:]+]]: !torch.vtensor<[3],f32>):
# CHECK:         torch.aten.mul.Tensor %[[ROW]], %[[W]]
# CHECK:         "tidal.yield"(%{{.+}}) : (!torch.vtensor<[],f32>) -> ()
# CHECK:       }) {num_xs = 1 : i64} : (!torch.vtensor<[6,3],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[6],f32>
