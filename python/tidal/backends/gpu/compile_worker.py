"""A kernel's text compiled by triton 3.6 (`compile_text`), and the compile worker process that
runs it for other processes (`serve`, this file run by path).

`triton.compile(path)` on a `.ttir` file skips the make_ttir passes (inliner, canonicalize,
combine, CSE); a source object of the AST kind whose `make_ir` parses our text runs them all
(FOUNDATION.md). A kernel written at TTGIR level (explicit layouts) enters as Gluon's frontend
output does: its cleanup passes, then straight to LLVM (Triton's layout passes would undo the
layouts). Triton's cache is keyed by the source's hash, here the text and signature: a kernel
compiled once, in any process, is loaded from disk.

This file imports nothing of tidal (only the standard library and triton): a worker, started as
`python compile_worker.py`, pays for importing triton alone, not torch or torch-mlir. It reads
one JSON job a line on stdin (name, text, signature pairs, stage, num_warps, target, launcher),
compiles it into Triton's disk cache (with `launcher`, Triton's C launcher of its signature too:
on a GPU machine's cold cache, building those one at a time at the first launches took longer
than the kernels) and answers one JSON line on stdout: {"error": null} or the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import types

# Compiles that parsed a kernel's text in this process: Triton parses only on a cache miss, so a
# kernel a worker compiled and this process loads leaves it unchanged (what the tests check).
parsed = 0


def text_source(name: str, text: str, signature: dict, stage: str):
    """A Triton source object whose IR is `text` (`stage` "ttir" or "ttgir")."""
    from triton._C.libtriton import ir as tir
    from triton.backends.compiler import Language
    from triton.compiler.compiler import ASTSource

    class TextSource(ASTSource):
        def __init__(self):  # noqa: D401  (ASTSource's constructor needs a Python function)
            self.name, self.signature, self.text = name, dict(signature), text
            self.language = Language.GLUON if stage == "ttgir" else Language.TRITON
            self.ext, self.constants, self.attrs = stage, {}, {}
            key = hashlib.sha256((self.text + repr(self.signature)).encode()).hexdigest()
            self.fn = types.SimpleNamespace(cache_key=key, arg_names=list(self.signature), launch_metadata=None, __name__=self.name)

        def hash(self):
            return self.fn.cache_key

        def make_ir(self, target, options, codegen_fns, module_map, context):
            global parsed
            parsed += 1
            with tempfile.NamedTemporaryFile("w", suffix="." + stage, delete=False) as f:
                f.write(self.text)
            try:
                module = tir.parse_mlir_module(f.name, context)
            finally:
                os.unlink(f.name)
            module.context = context
            return module

    return TextSource()


def compile_text(name: str, text: str, signature: dict, stage: str, num_warps: int, target):
    """Triton's CompiledKernel of `text` for `target` (a GPUTarget; None: the current GPU)."""
    from triton.compiler.compiler import compile as triton_compile

    return triton_compile(text_source(name, text, signature, stage), target=target,
                          options={"num_warps": num_warps, "enable_fp_fusion": False})


def serve(jobs, replies) -> None:
    """Compile each job read from `jobs` into Triton's cache, answering each on `replies`."""
    from triton.backends.compiler import GPUTarget

    for line in jobs:
        job = json.loads(line)
        try:
            compiled = compile_text(job["name"], job["text"], dict(job["signature"]), job["stage"], job["num_warps"],
                                    GPUTarget(job["target"][0], job["target"][1], 32))
            reply = {"error": None}
        except Exception as exc:  # noqa: BLE001  (the requester compiles it again and reports it, located)
            reply = {"error": f"{type(exc).__name__}: {str(exc).strip()[-2000:]}"}
        else:
            if job.get("launcher"):
                reply["launcher"] = _build_launcher(compiled)
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def _build_launcher(compiled) -> str | None:
    """Triton's launcher of `compiled` (C, built by the C compiler, a second or so each) into
    the disk cache, where the launching process's first launch finds it: None, or why not (no
    CUDA driver on this machine: the launching process builds it)."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        CudaLauncher(compiled.src, compiled.metadata)
    except Exception as exc:  # noqa: BLE001  (only a warm cache is lost)
        return f"{type(exc).__name__}: {str(exc).strip()[-500:]}"
    return None


if __name__ == "__main__":
    # Replies get a private copy of stdout; whatever triton or LLVM print goes to stderr instead.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, replies)
