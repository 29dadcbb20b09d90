func.func @f(%h: i32, %xs: memref<4x3xf32>) -> (i32, memref<4x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: i32, %x: f32):
    %n = "test.combine"(%c, %x) : (i32, f32) -> i32
    "tidal.yield"(%n, %n) : (i32, i32) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (i32, memref<4x3xf32>) -> (i32, memref<4x3xf32>)
  return %r#0, %r#1 : i32, memref<4x3xf32>
}
