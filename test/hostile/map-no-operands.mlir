func.func @f() -> tensor<5x2xf32> {
  %r = "tidal.map"() ({
  ^bb0:
    %z = "test.zero"() : () -> tensor<2xf32>
    "tidal.yield"(%z) : (tensor<2xf32>) -> ()
  }) {num_xs = 0 : i64} : () -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}
