// hostile: exit=0
func.func @f(%xs: tensor<5x2xf32>) -> tensor<5x2xf32> {
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    "tidal.yield"(%x) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}
