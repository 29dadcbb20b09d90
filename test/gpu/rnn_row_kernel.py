# RUN: tidal-compile %S/../corpus/rnn_scan_wide.py --emit ttgir --target cuda:90 | filecheck %s
# RUN: tidal-compile %S/../corpus/rnn_scan_wide.py --emit ptx --target cuda:90 | filecheck %s --check-prefix=PTX
# An RNN cell scan (the corpus's rnn_scan_wide) is ONE persistent kernel written at TTGIR level:
# every [16, w] tile in one mma accumulator layout; U split once, before the time loop, into TF32
# high and low parts held as tt.dot B operands (registers, never reloaded); each step converts h
# to the A operand once, splits it (the high part rounded in integer ops, the rest unrounded: an
# mma reads a TF32 operand's top 19 bits), computes the three TF32 products independently (each
# from zeros), then adds them, x_t·W (loaded one step ahead) and the bias; tanh is branch-free.

# CHECK-LABEL: // kernel tidal_scan_rows_1 (ttgir, cuda:90)
# CHECK:       #mma = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [1, 4], instrShape = [16, 8]}>
# CHECK:       ttg.target = "cuda:90"
# the number of steps is the kernel's last argument: one kernel for every T (a dynamic T included)
# CHECK:       tt.func public @tidal_scan_rows_1({{.*}}, %[[T:arg[0-9]+]]: i32 loc({{[^)]*}})) {
# CHECK-DAG:   %[[BIAS_B:.+]] = arith.constant dense<4096> : tensor<32x32xi32, #ttg.dot_op<{opIdx = 1
# CHECK-DAG:   %[[KEEP_B:.+]] = arith.constant dense<-8192> : tensor<32x32xi32, #ttg.dot_op<{opIdx = 1
# CHECK-DAG:   %[[ZERO:.+]] = arith.constant dense<0.000000e+00> : tensor<16x32xf32, #mma>
# CHECK-DAG:   %[[BIAS_A:.+]] = arith.constant dense<4096> : tensor<16x32xi32, #ttg.dot_op<{opIdx = 0
# CHECK-DAG:   %[[KEEP_A:.+]] = arith.constant dense<-8192> : tensor<16x32xi32, #ttg.dot_op<{opIdx = 0
# U's high part: rounded to nearest, ties away, in integer ops; its low part is the rest
# CHECK:       %[[U:.+]] = tt.load {{.*}} : tensor<32x32x!tt.ptr<f32>, #ttg.dot_op<{opIdx = 1
# CHECK-NEXT:  %[[UBITS:.+]] = tt.bitcast %[[U]]
# CHECK-NEXT:  %[[UBIASED:.+]] = arith.addi %[[UBITS]], %[[BIAS_B]]
# CHECK-NEXT:  %[[UKEPT:.+]] = arith.andi %[[UBIASED]], %[[KEEP_B]]
# CHECK-NEXT:  %[[UHI:.+]] = tt.bitcast %[[UKEPT]]
# CHECK-NEXT:  %[[ULO:.+]] = arith.subf %[[U]], %[[UHI]]
# CHECK-NOT:   cvt.rna
# CHECK:       scf.for %{{.+}} = %{{.+}} to %[[T]] step %{{.+}} iter_args(%[[H:.+]] = %{{.+}}, %[[XW:.+]] = %{{.+}})
# CHECK-NOT:   ttg.local_load
# CHECK:       %[[A:.+]] = ttg.convert_layout %[[H]] : tensor<16x32xf32, #mma> -> tensor<16x32xf32, #ttg.dot_op<{opIdx = 0
# CHECK-NEXT:  %[[ABITS:.+]] = tt.bitcast %[[A]]
# CHECK-NEXT:  %[[ABIASED:.+]] = arith.addi %[[ABITS]], %[[BIAS_A]]
# CHECK-NEXT:  %[[AKEPT:.+]] = arith.andi %[[ABIASED]], %[[KEEP_A]]
# CHECK-NEXT:  %[[AHI:.+]] = tt.bitcast %[[AKEPT]]
# CHECK-NEXT:  %[[ALO:.+]] = arith.subf %[[A]], %[[AHI]]
# CHECK-NEXT:  %[[LOHI:.+]] = tt.dot %[[ALO]], %[[UHI]], %[[ZERO]], inputPrecision = tf32
# CHECK-NEXT:  %[[HILO:.+]] = tt.dot %[[AHI]], %[[ULO]], %[[ZERO]], inputPrecision = tf32
# CHECK-NEXT:  %[[SMALL:.+]] = arith.addf %[[LOHI]], %[[HILO]]
# CHECK-NEXT:  %[[HIHI:.+]] = tt.dot %[[AHI]], %[[UHI]], %[[ZERO]], inputPrecision = tf32
# CHECK-NEXT:  %[[HU:.+]] = arith.addf %[[HIHI]], %[[SMALL]]
# CHECK-NEXT:  arith.addf %[[XW]], %[[HU]]
# CHECK:       "ex2.approx.ftz.f32 $0, $1;"
# CHECK-NOT:   ttg.local_load
# CHECK:       scf.yield

# PTX-LABEL: .entry tidal_scan_rows_1(
# PTX:       mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
# PTX-NOT:   __nv_tanhf
