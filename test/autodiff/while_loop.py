# RUN: %python %s | filecheck %s
# while_loop's rule, dynamic trip count: the forward is ONE tidal.while {stack_outputs} over (step
# counter, carries, entering carries) whose stacked rows have a dynamic leading dim (no maximum
# trip count); the adjoint is ONE tidal.while walking the rows backwards with the body's VJP.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import while_loop


def grow_until(x, w):
    def cond_fn(i, x):
        return (x.norm() < 4.0) & (i < 50)

    def body_fn(i, x):
        return i + 1, torch.tanh(x @ w) * 1.5 + x

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))[1]


from tidal.dynamo import training_ir

forward, backward = training_ir(grow_until, (torch.ones(2, 3) * 0.3).requires_grad_(), (torch.randn(3, 3) * 0.3).requires_grad_())
print("// forward")
print(forward)
print("// backward")
print(backward)

# CHECK-LABEL: // forward
# CHECK:       %[[ROWS:[0-9]+]]:5 = "tidal.while"
# CHECK:       {num_carries = 5 : i64, stack_outputs = true}
# CHECK-SAME:    -> (!torch.vtensor<[?],si64>, !torch.vtensor<[?],si64>, !torch.vtensor<[?,2,3],f32>, !torch.vtensor<[?],si64>, !torch.vtensor<[?,2,3],f32>)
# CHECK:       torch.aten.index_select %[[ROWS]]#2
# CHECK:       return {{.+}}%[[ROWS]]#0, %[[ROWS]]#3, %[[ROWS]]#4
# CHECK-LABEL: // backward
# CHECK:       func.func @main({{.+}}!torch.vtensor<[?,2,3],f32>
# CHECK:       "tidal.while"
# CHECK:         torch.aten.index_select
# CHECK:         torch.aten.tanh
# CHECK:         torch.aten.where.self
# CHECK:       {num_carries = 4 : i64}
# CHECK-NOT:   stack_outputs
