# RUN: %python %s | filecheck %s
# associative_scan's rule, O(T) memory: the forward is the scan alone and keeps its results (and
# inputs: here the result, then a and the b-prefix for the backward), no T x T matrix. The adjoint depends on the combine:
# - elementwise (the linear recurrence, k = 2 operands): the lhs Jacobians of all steps at once
#   ([5,3], padded to [6,3]), reversed, and ONE reverse associative scan over the affine maps, no
#   sequential scan. Only the b-prefix is used, and J_lhs is diagonal (result j depends on lhs j
#   alone): the a-prefix's cotangent stays zero, so the scan carries one entry of A and one
#   cotangent, the textbook adjoint g_t = a_{t+1} g_{t+1} + ȳ_t;
# - a matrix product (not elementwise): ONE reverse sequential scan over steps T-1..1 (slices
#   [5,...] of the reversed results and inputs) of the combine's VJP, then step 0 is prepended.
import warnings

warnings.filterwarnings("ignore")

import torch
from torch._higher_order_ops import associative_scan

from tidal.dynamo import training_ir


def linear_recurrence(a, b):
    return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, combine_mode="generic")[1]


def matrix_products(m):
    return associative_scan(lambda p, q: p @ q, m, dim=0, combine_mode="generic")


a, b = (0.5 + torch.rand(6, 3)).requires_grad_(), torch.randn(6, 3, requires_grad=True)
for name, (fn, args) in {
    "recurrence": (linear_recurrence, (a, b)),
    "matmul": (matrix_products, (torch.randn(6, 2, 2, requires_grad=True),)),
}.items():
    forward, backward = training_ir(fn, *args)
    print(f"// {name} forward")
    print(forward)
    print(f"// {name} backward")
    print(backward)

# CHECK-LABEL: // recurrence forward
# CHECK:       func.func @main(%arg0: !torch.vtensor<[6,3],f32>, %arg1: !torch.vtensor<[6,3],f32>)
# CHECK-SAME:    -> (!torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>) {
# CHECK:       "tidal.associative_scan"
# CHECK-NOT:   [6,6]
# CHECK-NOT:   "tidal.scan"
# CHECK-LABEL: // recurrence backward
# CHECK-NOT:   [6,6]
# CHECK-NOT:   "tidal.scan"
# CHECK:       %[[A:[0-9]+]] = torch.aten.cat {{.+}} -> !torch.vtensor<[6,3],f32>
# CHECK:       %[[RA:[0-9]+]] = torch.aten.flip %[[A]]
# CHECK:       %[[RG:[0-9]+]] = torch.aten.flip %
# CHECK:       %[[ADJ:[0-9]+]]:2 = "tidal.associative_scan"(%[[RA]], %[[RG]])
# CHECK:       "tidal.yield"({{.+}}) : (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>) -> ()
# CHECK:       torch.aten.flip %[[ADJ]]#1
# CHECK-NOT:   "tidal.scan"
# CHECK-NOT:   "tidal.associative_scan"
# CHECK:       return

# CHECK-LABEL: // matmul forward
# CHECK:       "tidal.associative_scan"
# CHECK-NOT:   "tidal.scan"
# CHECK-LABEL: // matmul backward
# CHECK-NOT:   "tidal.associative_scan"
# CHECK:       %[[SEQ:[0-9]+]]:2 = "tidal.scan"
# CHECK:       num_carries = 1 : i64, num_xs = 3 : i64
# CHECK-SAME:    -> (!torch.vtensor<[2,2],f32>, !torch.vtensor<[5,2,2],f32>)
# CHECK:       torch.aten.flip %[[SEQ]]#1
# CHECK:       torch.aten.cat {{.+}} -> !torch.vtensor<[6,2,2],f32>
# CHECK-NOT:   "tidal.scan"
# CHECK-NOT:   "tidal.associative_scan"
