// invalid UTF-8 in a comment: ÿþ and in a string attribute below
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> attributes {note = "ÿþÃ("} {
  %y = "tidal.map"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
