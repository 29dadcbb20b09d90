# RUN: tidal-compile %S/../corpus/while_logistic_map.py --emit ttir --target cuda:90 | filecheck %s
# A while_loop whose body is elementwise and whose condition reads 0-d values only (the corpus's
# logistic map) is ONE kernel with the loop inside (scf.while): the 0-d counter travels as a
# scalar, the tensor as a tile, r is loaded once before the loop; no host round trip per iteration.

# CHECK-LABEL: // kernel tidal_while_1 (ttir, cuda:90)
# CHECK:       %[[N:.+]] = tt.load %arg2 : !tt.ptr<i64>
# CHECK:       %[[R:.+]] = tt.load {{.*}} : tensor<256x!tt.ptr<f32>>
# CHECK:       scf.while (%[[I:.+]] = %{{.+}}, %[[Y:.+]] = %{{.+}}) : (i64, tensor<256xf32>)
# CHECK-NEXT:  arith.cmpi slt, %[[I]], %[[N]] : i64
# CHECK-NEXT:  scf.condition
# CHECK:       arith.addi %{{.+}}, %c1_i64 : i64
# CHECK:       arith.mulf %[[R]], %{{.+}} : tensor<256xf32>
# CHECK:       scf.yield
# CHECK-NOT:   tt.load
# CHECK:       tt.store
# CHECK-NOT:   // kernel
