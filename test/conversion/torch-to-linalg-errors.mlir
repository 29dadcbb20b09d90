// RUN: not tidal-opt %s --pass-pipeline='builtin.module(tidal-torch-to-linalg)' 2>&1 | filecheck %s
// An aten op torch-mlir cannot lower is reported at its own location, by name.
// CHECK: model.py:12:0: error: 'torch.aten.fft_fft' op has no lowering to linalg in torch-mlir
func.func @f(%arg0: !torch.vtensor<[8],f32>) -> !torch.vtensor<[8],complex<f32>> {
  %none = torch.constant.none
  %int-1 = torch.constant.int -1
  %0 = torch.aten.fft_fft %arg0, %none, %int-1, %none : !torch.vtensor<[8],f32>, !torch.none, !torch.int, !torch.none -> !torch.vtensor<[8],complex<f32>> loc("model.py":12:0)
  return %0 : !torch.vtensor<[8],complex<f32>>
}
