func.func @c(%p: !torch.int, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (!torch.int, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
