func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = "tidal.map"(%x) ({
  ^bb0(%a: tensor<f32>):
    "tidal.yield"(%a) : (tensor<f32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<4xf64>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
