"""Kernels compiled by triton 3.6 (`compile_kernel`, its text through
`compile_worker.compile_text`), checked without compiling (`kernel_errors`) and printed at a
stage (`kernel_asm`). No GPU is needed to compile for a target.
"""

from __future__ import annotations

import os
import sys
import tempfile

from tidal.backends.gpu.compile_worker import compile_text
from tidal.backends.gpu.ttir import TARGET_PLACEHOLDER, Kernel

DEFAULT_TARGET = ("cuda", 90)


def _triton():
    """Triton's GPUTarget, or a clear error where the GPU extra is not installed."""
    try:
        from triton.backends.compiler import GPUTarget
    except ImportError as exc:
        from tidal.diagnostics import TidalUnsupported

        raise TidalUnsupported("GPU backend: triton is not installed (pip install 'tidal[gpu]', triton==3.6.0)", None) from exc
    return GPUTarget


_verify_context = None


def kernel_errors(kernel: Kernel) -> str | None:
    """Triton's parser and verifier on `kernel`'s text, in-process and without compiling (a few
    ms): None when valid, else the diagnostics. Triton's diagnostics go to the C++ stderr, so
    file descriptor 2 is taken for the parse."""
    global _verify_context
    _triton()
    from triton._C.libtriton import ir as tir

    if _verify_context is None:
        from triton.backends.nvidia.compiler import CUDABackend

        _verify_context = tir.context()
        tir.load_dialects(_verify_context)
        CUDABackend(_default_gpu_target()).load_dialects(_verify_context)
    text = kernel_text(kernel, _default_gpu_target())
    with tempfile.NamedTemporaryFile("w", suffix="." + kernel.stage, delete=False) as f:
        f.write(text)
    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            tir.parse_mlir_module(f.name, _verify_context)
            failed = False
        except RuntimeError:
            failed = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.unlink(f.name)
        err.seek(0)
        diagnostics = err.read().decode(errors="replace").replace(f.name, kernel.name)
    return (diagnostics.strip() or "the parser gave no reason") if failed else None


def parse_target(text: str) -> tuple[str, int]:
    """`cuda:90` → ("cuda", 90)."""
    backend, _, arch = text.partition(":")
    if backend != "cuda" or not arch.isdigit():
        raise ValueError(f"unknown target '{text}' (expected cuda:<sm>, e.g. cuda:90)")
    return backend, int(arch)


_compiled: dict[tuple[str, tuple], object] = {}


def compile_kernel(kernel: Kernel, target: tuple[str, int] | None = None, device: int | None = None):
    """The triton CompiledKernel of `kernel` for `target`, or (None) for the GPU numbered `device`
    (None: the current one). A CompiledKernel loads its binary into the device current at its
    first launch and launches there only, so each GPU gets its own."""
    GPUTarget = _triton()
    if target is None and device is None:
        from triton.runtime import driver

        device = driver.active.get_current_device()
    key = (kernel.text, tuple(kernel.signature.items()), target or device, kernel.num_warps)
    if key not in _compiled:
        gpu_target = GPUTarget(target[0], target[1], 32) if target else None
        if kernel.stage == "ttgir" and gpu_target is None:
            from triton.runtime import driver

            gpu_target = driver.active.get_current_target()
        try:
            _compiled[key] = compile_text(kernel.name, kernel_text(kernel, gpu_target), kernel.signature,
                                          kernel.stage, kernel.num_warps, gpu_target)
        except RuntimeError as exc:
            from tidal.diagnostics import TidalUnsupported

            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise TidalUnsupported(f"GPU backend: triton could not compile kernel {kernel.name} ({first}); "
                                   "please report it with the program", kernel.location) from exc
    return _compiled[key]


def _default_gpu_target():
    return _triton()(*DEFAULT_TARGET, 32)


def kernel_text(kernel: Kernel, gpu_target) -> str:
    """`kernel`'s text for `gpu_target`: a TTGIR module names its target in the text."""
    if kernel.stage != "ttgir":
        return kernel.text
    return kernel.text.replace(TARGET_PLACEHOLDER, f"{gpu_target.backend}:{gpu_target.arch}")


def kernel_asm(kernel: Kernel, stage: str, target: tuple[str, int] = DEFAULT_TARGET) -> str:
    """`kernel` as text at `stage` (ttir: after make_ttir; ttgir; llir; ptx). A kernel written at
    TTGIR level has no TTIR: asked for it, its TTGIR comes back, saying so."""
    asm = compile_kernel(kernel, target).asm
    if stage == "ttir" and kernel.stage == "ttgir":
        return f"// {kernel.name} is written at TTGIR level (explicit layouts): no TTIR stage\n{asm['ttgir']}"
    return asm[stage]
