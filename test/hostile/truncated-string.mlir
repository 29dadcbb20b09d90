func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = "tidal.map(%x