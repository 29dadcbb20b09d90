func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = arith.addf %x, %undefined : tensor<3xf32>
  return %y : tensor<3xf32>
}
