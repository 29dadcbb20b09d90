"""Code generation backends: `cpu/` (LLVM JIT, in-process BLAS, torch's OpenMP team) and `gpu/`
(Triton kernels and a host plan). The two never import each other; what both use lives here
(`contractions.py`)."""
