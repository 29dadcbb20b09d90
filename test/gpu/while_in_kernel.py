# RUN: tidal-compile %s --emit ttir --target cuda:90 | filecheck %s
# A while_loop whose body is elementwise and whose condition reads 0-d values only is ONE kernel
# with the loop inside (scf.while): the 0-d counter travels as a scalar, the tensor as a tile; no
# host round trip per iteration.
import torch
from torch._higher_order_ops import while_loop


class LogisticMap(torch.nn.Module):
    def forward(self, x, n):
        def cond_fn(i, y):
            return i < n

        def body_fn(i, y):
            return i + 1, 3.7 * y * (1.0 - y)

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))[1]


model = LogisticMap()
example_inputs = (torch.rand(4096) * 0.5 + 0.25, torch.tensor(100))

# CHECK-LABEL: // kernel tidal_while_{{[0-9]+}} (ttir, cuda:90)
# CHECK:       tt.load
# CHECK:       scf.while (%[[I:.+]] = %{{.+}}, %[[Y:.+]] = %{{.+}}) : (i64, tensor<{{[0-9]+}}xf32>)
# CHECK:       arith.cmpi slt, %[[I]]
# CHECK:       scf.condition
# CHECK:       arith.addi
# CHECK:       arith.mulf
# CHECK:       scf.yield
# CHECK:       tt.store
# CHECK-NOT:   // kernel
