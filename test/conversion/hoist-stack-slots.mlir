// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(convert-vector-to-scf, tidal-hoist-stack-slots)' | filecheck %s
// A stack slot in a loop body is a fresh one on every iteration, never released before the
// function returns. convert-vector-to-scf puts a 2-D transfer's scratch buffer at the start of the
// loop body holding it (a 16x16 transpose tile: two slots of 1 KiB per tile, and a [16, 131072]
// transpose overflowed the 8 MiB stack). A static slot whose address stays in the iteration moves
// to the start of its allocation scope: one slot for every iteration.

// CHECK-LABEL: func.func @tiles
// CHECK-NEXT:    memref.alloca() : memref<vector<16x16xf32>>
// CHECK-NEXT:    memref.alloca() : memref<vector<16x16xf32>>
// CHECK:         scf.for
// CHECK-NOT:     memref.alloca
// CHECK:         return
func.func @tiles(%src: memref<131072x16xf32>, %dst: memref<16x131072xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %n = arith.constant 131072 : index
  %pad = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c16 {
    %v = vector.transfer_read %src[%i, %c0], %pad {in_bounds = [true, true]} : memref<131072x16xf32>, vector<16x16xf32>
    %t = vector.transpose %v, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
    vector.transfer_write %t, %dst[%c0, %i] {in_bounds = [true, true]} : vector<16x16xf32>, memref<16x131072xf32>
  }
  return
}

// -----

// Left where they are: a slot yielded out of its iteration or passed to a call (its address may
// be used after the iteration), a slot of dynamic size, and one already at the start of its scope.
// CHECK-LABEL: func.func @left_alone
// CHECK:         memref.alloca() : memref<4xf32>
// CHECK:         scf.for
// CHECK-NEXT:      memref.alloca() : memref<4xf32>
// CHECK-NEXT:      scf.yield
// CHECK:         scf.for
// CHECK-NEXT:      %[[P:.*]] = memref.alloca() : memref<4xf32>
// CHECK-NEXT:      func.call @use(%[[P]])
// CHECK:         scf.for
// CHECK-NEXT:      memref.alloca(%{{.*}}) : memref<?xf32>
func.func private @use(memref<4xf32>)
func.func @left_alone(%n: index, %x: f32) -> memref<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %top = memref.alloca() : memref<4xf32>
  %last = scf.for %i = %c0 to %n step %c1 iter_args(%prev = %top) -> memref<4xf32> {
    %s = memref.alloca() : memref<4xf32>
    scf.yield %s : memref<4xf32>
  }
  scf.for %i = %c0 to %n step %c1 {
    %s = memref.alloca() : memref<4xf32>
    func.call @use(%s) : (memref<4xf32>) -> ()
  }
  scf.for %i = %c0 to %n step %c1 {
    %s = memref.alloca(%i) : memref<?xf32>
    memref.store %x, %s[%c0] : memref<?xf32>
  }
  return %last : memref<4xf32>
}

// -----

// An scf.forall is an allocation scope of its own (one slot per iteration, and its iterations may
// run at once on threads): a slot in a loop inside it moves to the start of its body, not out of it.
// CHECK-LABEL: func.func @in_forall
// CHECK:         scf.forall
// CHECK-NEXT:      memref.alloca() : memref<4xf32>
// CHECK-NEXT:      scf.for
// CHECK-NEXT:        memref.store
func.func @in_forall(%n: index, %x: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.forall (%j) in (%n) {
    scf.for %i = %c0 to %n step %c1 {
      %s = memref.alloca() : memref<4xf32>
      memref.store %x, %s[%i] : memref<4xf32>
    }
  }
  return
}
