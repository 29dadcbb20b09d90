func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = "tidal.fori"(%x) ({
  ^bb0(%a: tensor<3xf32>):
    "tidal.yield"(%a) : (tensor<3xf32>) -> ()
  }) : (tensor<3xf32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
