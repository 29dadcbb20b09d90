func.func @w(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    %b = "test.widen"(%a) : (tensor<4xf32>) -> tensor<4xf64>
    "tidal.yield"(%b) : (tensor<4xf64>) -> ()
  }) {num_carries = 1 : i64} : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
