func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  "tidal.yield"(%x) : (tensor<3xf32>) -> ()
  return %x : tensor<3xf32>
}
