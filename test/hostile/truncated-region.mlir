func.func @f(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> (tensor<3xf32>, tensor<4x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    %n = arith.addf %c, %x : tensor<3xf32>
    "tidal.yie