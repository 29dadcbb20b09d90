// hostile: args=--pass-pipeline=builtin.module(tidal-linalg-to-llvm)
func.func @f(%h: tensor<?xf32>, %xs: tensor<?x?xf32>) -> (tensor<?xf32>, tensor<?x?xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<?xf32>, %x: tensor<?xf32>):
    %n = arith.addf %c, %x : tensor<?xf32>
    "tidal.yield"(%n, %n) : (tensor<?xf32>, tensor<?xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<?xf32>, tensor<?x?xf32>) -> (tensor<?xf32>, tensor<?x?xf32>)
  return %r#0, %r#1 : tensor<?xf32>, tensor<?x?xf32>
}
