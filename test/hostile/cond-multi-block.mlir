func.func @c(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    cf.br ^bb1(%a : tensor<4xf32>)
  ^bb1(%b: tensor<4xf32>):
    "tidal.yield"(%b) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
