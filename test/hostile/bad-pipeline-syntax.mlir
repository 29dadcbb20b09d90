// hostile: args=--pass-pipeline=builtin.module(cse,,((
func.func @f(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> (tensor<3xf32>, tensor<4x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    %n = arith.addf %c, %x : tensor<3xf32>
    "tidal.yield"(%n, %n) : (tensor<3xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> (tensor<3xf32>, tensor<4x3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<4x3xf32>
}
