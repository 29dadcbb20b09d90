// hostile: args=--pass-pipeline=builtin.module(tidal-linalg-to-llvm)
func.func @f(%h: tensor<*xf32>, %xs: tensor<4x3xf32>) -> (tensor<*xf32>, tensor<4x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<*xf32>, %x: tensor<3xf32>):
    %n = tensor.cast %c : tensor<*xf32> to tensor<3xf32>
    %m = arith.addf %n, %x : tensor<3xf32>
    %u = tensor.cast %m : tensor<3xf32> to tensor<*xf32>
    "tidal.yield"(%u, %m) : (tensor<*xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<*xf32>, tensor<4x3xf32>) -> (tensor<*xf32>, tensor<4x3xf32>)
  return %r#0, %r#1 : tensor<*xf32>, tensor<4x3xf32>
}
