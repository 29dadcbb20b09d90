# RUN: %python %s | filecheck %s
# torch.cond imports as tidal.cond: the predicate is a 0-d i1 tensor, each branch's operands come
# in as block arguments, and ops carry the user's source line as their location.
import warnings

warnings.filterwarnings("ignore")

import torch

from tidal.importer import import_program


def clamp_if_big(x, limit):
    return torch.cond(x.abs().max() > limit, lambda t, l: t.clamp(-l, l), lambda t, l: t + 0.0, (x, limit))


prog = import_program(clamp_if_big, (torch.randn(5), torch.tensor(1.0)))
print(prog.module)
cond = next(op for op in prog.module.body.operations[0].regions[0].blocks[0].operations if op.name == "tidal.cond")
print("cond location:", cond.location)

# CHECK-LABEL: func.func @main
# CHECK:       %[[P:.+]] = torch.aten.gt.Tensor
# CHECK:       "tidal.cond"(%[[P]], %arg0, %arg1) ({
# CHECK-NEXT:  ^bb0(%[[T:[^:]+]]: !torch.vtensor<[5],f32>, %[[L:[^:]+]]: !torch.vtensor<[],f32>):
# CHECK:         torch.aten.clamp.Tensor %[[T]]
# CHECK:         "tidal.yield"
# CHECK:       }, {
# CHECK:         torch.aten.add.Scalar
# CHECK:         "tidal.yield"
# CHECK:       }) : (!torch.vtensor<[],i1>, !torch.vtensor<[5],f32>, !torch.vtensor<[],f32>) -> !torch.vtensor<[5],f32>
# CHECK:       cond location: loc("cond"("{{.*}}cond.py":14:0))
