"""GPU backend: linalg-level tidal programs as Triton kernels (TTIR text, compiled by triton 3.6)
launched on CUDA tensors by a host plan (`program.py`, the entry: the plan `plan.py` and its
kernel variants `variants.py`, launches `launch.py`, CUDA graphs `capture.py`). The tensor-level
preparation (elementwise fusion, conds with elementwise branches turned into device-side selects,
reductions over one operand merged into one) is `tidal-gpu-prepare`; `kernels.py` makes the
kernels, `ttir.py` writes their text, `triton_compile.py` compiles them (no GPU needed to compile
for a target)."""

import tidal.backends.contractions  # noqa: F401  (registers tidal-hide-contractions / tidal-restore-contractions)
import tidal.backends.gpu.affine_scans  # noqa: F401  (registers tidal-affine-scans)
import tidal.backends.gpu.cond_select  # noqa: F401  (registers tidal-cond-to-select)
import tidal.backends.gpu.pad_as_generic  # noqa: F401  (registers tidal-pad-as-generic)
import tidal.backends.gpu.sibling_reductions  # noqa: F401  (registers tidal-fuse-sibling-reductions)
from tidal.passes.registry import tidal_pipeline

GPU_PREPARE = tidal_pipeline(
    "tidal-gpu-prepare",
    "linalg-level tidal IR → fused elementwise generics, ready for Triton kernels (GPU backend)",
    "tidal-drop-error-checks, tidal-hoist-body-sizes, canonicalize, tidal-fold-adjacent-slices, tidal-pad-as-generic, tidal-cond-to-select, tidal-hide-contractions, func.func(linalg-fuse-elementwise-ops), "
    "tidal-restore-contractions, "
    "canonicalize, cse, tidal-fuse-sibling-reductions",
)
# torch-level rewrites of the GPU backend, after the shared `tidal` stage
GPU_TORCH_LEVEL = "tidal-affine-scans"
