"""Code generation backends: `cpu` (LLVM JIT) now; Triton for the GPU later."""
