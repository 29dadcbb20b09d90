func.func @f(%x: tensor<3xbanana>) -> tensor<3xbanana> {
  return %x : tensor<3xbanana>
}
