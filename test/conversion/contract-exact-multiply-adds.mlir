// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-contract-exact-multiply-adds)' | filecheck %s
// A multiply by ±2^k (k <= 0) feeding an add of a constant of normal magnitude may become one
// FMA: it rounds as the two operations do. Anything else keeps eager's two roundings.

// CHECK-LABEL: llvm.func @fused
// CHECK:       llvm.fmul %{{.+}}, %{{.+}} {fastmathFlags = #llvm.fastmath<contract>} : vector<4xf32>
// CHECK-NEXT:  llvm.fadd %{{.+}}, %{{.+}} {fastmathFlags = #llvm.fastmath<contract>} : vector<4xf32>
// CHECK:       llvm.fmul %{{.+}}, %{{.+}} {fastmathFlags = #llvm.fastmath<contract>} : f64
// CHECK-NEXT:  llvm.fsub %{{.+}}, %{{.+}} {fastmathFlags = #llvm.fastmath<contract>} : f64
// CHECK:       llvm.fmul %{{.+}}, %{{.+}} {fastmathFlags = #llvm.fastmath<contract>} : f32
// CHECK-NEXT:  llvm.fsub %{{.+}}, %{{.+}} {fastmathFlags = #llvm.fastmath<contract>} : f32
llvm.func @fused(%x: vector<4xf32>, %y: f64, %z: f32) -> !llvm.struct<(vector<4xf32>, f64, f32)> {
  %half = llvm.mlir.constant(dense<5.000000e-01> : vector<4xf32>) : vector<4xf32>
  %one = llvm.mlir.constant(dense<1.000000e+00> : vector<4xf32>) : vector<4xf32>
  %0 = llvm.fmul %x, %half : vector<4xf32>
  %1 = llvm.fadd %0, %one : vector<4xf32>
  %eighth = llvm.mlir.constant(-1.250000e-01 : f64) : f64
  %three = llvm.mlir.constant(3.000000e+00 : f64) : f64
  %2 = llvm.fmul %eighth, %y : f64
  %3 = llvm.fsub %2, %three : f64
  %unit = llvm.mlir.constant(1.000000e+00 : f32) : f32
  %c = llvm.mlir.constant(-2.500000e+00 : f32) : f32
  %4 = llvm.fmul %z, %unit : f32
  %5 = llvm.fsub %c, %4 : f32
  %s0 = llvm.mlir.poison : !llvm.struct<(vector<4xf32>, f64, f32)>
  %s1 = llvm.insertvalue %1, %s0[0] : !llvm.struct<(vector<4xf32>, f64, f32)>
  %s2 = llvm.insertvalue %3, %s1[1] : !llvm.struct<(vector<4xf32>, f64, f32)>
  %s3 = llvm.insertvalue %5, %s2[2] : !llvm.struct<(vector<4xf32>, f64, f32)>
  llvm.return %s3 : !llvm.struct<(vector<4xf32>, f64, f32)>
}

// Not exact, or not this pattern: a multiplier that is no power of two or above 1 (x * 2 can
// overflow where the fused sum does not), an addend that is not a constant, a tiny or zero
// addend, a product with a second use, f16.
// CHECK-LABEL: llvm.func @kept
// CHECK-NOT:   fastmath
// CHECK:       llvm.return
llvm.func @kept(%x: f32, %y: f32, %h: f16) -> !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)> {
  %three = llvm.mlir.constant(3.000000e+00 : f32) : f32
  %two = llvm.mlir.constant(2.000000e+00 : f32) : f32
  %half = llvm.mlir.constant(5.000000e-01 : f32) : f32
  %one = llvm.mlir.constant(1.000000e+00 : f32) : f32
  %tiny = llvm.mlir.constant(1.000000e-35 : f32) : f32
  %zero = llvm.mlir.constant(0.000000e+00 : f32) : f32
  %0 = llvm.fmul %x, %three : f32
  %1 = llvm.fadd %0, %one : f32
  %2 = llvm.fmul %x, %two : f32
  %3 = llvm.fadd %2, %one : f32
  %4 = llvm.fmul %x, %half : f32
  %5 = llvm.fadd %4, %y : f32
  %6 = llvm.fmul %y, %half : f32
  %7 = llvm.fadd %6, %tiny : f32
  %8 = llvm.fmul %x, %half : f32
  %9 = llvm.fadd %8, %zero : f32
  %10 = llvm.fmul %y, %half : f32
  %11 = llvm.fadd %10, %one : f32
  %12 = llvm.fmul %10, %10 : f32
  %hh = llvm.mlir.constant(5.000000e-01 : f16) : f16
  %h1 = llvm.mlir.constant(1.000000e+00 : f16) : f16
  %13 = llvm.fmul %h, %hh : f16
  %14 = llvm.fadd %13, %h1 : f16
  %s0 = llvm.mlir.poison : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s1 = llvm.insertvalue %1, %s0[0] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s2 = llvm.insertvalue %3, %s1[1] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s3 = llvm.insertvalue %5, %s2[2] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s4 = llvm.insertvalue %7, %s3[3] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s5 = llvm.insertvalue %9, %s4[4] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s6 = llvm.insertvalue %11, %s5[5] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  %s7 = llvm.insertvalue %14, %s6[6] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
  llvm.return %s7 : !llvm.struct<(f32, f32, f32, f32, f32, f32, f16)>
}
