func.func @c(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %r) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
