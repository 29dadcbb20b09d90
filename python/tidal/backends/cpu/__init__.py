"""CPU backend: linalg-level tidal IR → scf → bufferized memrefs → LLVM → in-process JIT.

The whole program, loops included, becomes one native function: a `tidal.while` is an
`scf.while` in machine code, with no Python per iteration.
"""

from __future__ import annotations

import functools
import hashlib
import os

from torch_mlir import ir

import tidal.backends.contractions  # noqa: F401  (registers tidal-hide-contractions / tidal-restore-contractions)
import tidal.backends.cpu.aten_runtime  # noqa: F401  (registers tidal-aten-calls-to-runtime)
import tidal.backends.cpu.blas  # noqa: F401  (registers tidal-matmul-to-blas, tidal-fold-into-matmul)
import tidal.backends.cpu.concat  # noqa: F401  (registers tidal-concat-in-place)
import tidal.backends.cpu.exact_contractions  # noqa: F401  (registers tidal-contract-exact-multiply-adds)
import tidal.backends.cpu.fast_math  # noqa: F401  (registers tidal-fast-math)
import tidal.backends.cpu.forwarded_results  # noqa: F401  (registers tidal-forward-aliased-results)
import tidal.backends.cpu.huge_pages  # noqa: F401  (registers tidal-huge-page-buffers)
import tidal.backends.cpu.parallel_generics  # noqa: F401  (registers tidal-parallelize-generics)
import tidal.backends.cpu.results_to_arguments  # noqa: F401  (registers tidal-results-to-arguments)
import tidal.backends.cpu.scan_transposes  # noqa: F401  (registers tidal-fold-scan-transposes)
import tidal.backends.cpu.step_destinations  # noqa: F401  (registers tidal-write-steps-in-place, tidal-walk-scan-rows)
import tidal.backends.cpu.sliced_inputs  # noqa: F401  (registers tidal-accumulate-into-sliced-inputs)
import tidal.backends.cpu.soft_bf16  # noqa: F401  (registers tidal-soft-bf16)
import tidal.backends.cpu.split_functions  # noqa: F401  (registers tidal-split-large-functions)
import tidal.backends.cpu.stack_slots  # noqa: F401  (registers tidal-hoist-stack-slots)
import tidal.backends.cpu.step_slices  # noqa: F401  (registers tidal-fuse-into-step-slices)
import tidal.backends.cpu.threads  # noqa: F401  (registers tidal-forall-to-threads, tidal-parallelism-to-threads)
import tidal.backends.cpu.transpose_tiles  # noqa: F401  (registers tidal-transposes-to-generics, tidal-tile-elementwise)
import tidal.backends.cpu.vector_width  # noqa: F401  (registers tidal-prefer-wide-vectors)
import tidal.backends.cpu.vectorize  # noqa: F401  (registers tidal-vectorize)
from tidal.passes.registry import function_named, tidal_pass, tidal_pipeline

# The ATen helper calls' operand buffers are taken right before each call (tidal-anchor-aten-buffers:
# code motion may have moved them away from it, and One-Shot sees the read at the to_buffer).
# eliminate-empty-tensors lets an op whose result is inserted into a larger tensor (a concat's
# operand, `tidal-concat-in-place`) compute straight into its slice. Arguments are the caller's tensors: One-Shot would otherwise treat them as writable and let an op
# whose destination is an argument (a matmul accumulating into an input, `b + x @ w`) overwrite it.
# torch-mlir's tm_tensor ops (cumsum/cumprod as tm_tensor.scan, ...) have no One-Shot
# bufferization model: One-Shot leaves them to torch-mlir's own tm-tensor-bufferize, which runs
# right after it, and tm-tensor-to-loops lowers them with the linalg loops. Buffer hoisting then
# moves a loop body's temporaries of fixed size out of the loop (one allocation, not one per
# iteration; buffers a loop yields stay inside). An op that bufferized in place into the slice a
# `tensor.insert_slice` then copies to leaves a copy between two equal subviews: cse makes them
# one value and canonicalize drops the self-copy.
BUFFERIZE = (
    "tidal-anchor-aten-buffers, tidal-read-only-arguments, eliminate-empty-tensors, one-shot-bufferize{bufferize-function-boundaries allow-unknown-ops "
    "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}, "
    "func.func(tm-tensor-bufferize), cse, canonicalize, tidal-write-steps-in-place, tidal-walk-scan-rows, func.func(buffer-hoisting, buffer-loop-hoisting)"
)

# tidal-fold-into-matmul runs before elementwise fusion too: fusion would otherwise merge a
# transpose feeding a matmul with the reshape before it into a generic copy (the [H, T·B] operand
# of a weight cotangent summed after a scan), and BLAS could no longer read it transposed.
LINALG_TO_LLVM = tidal_pipeline(
    "tidal-linalg-to-llvm",
    "linalg-level tidal IR → LLVM dialect (tidal→scf, fusion, bufferization, loops, LLVM)",
    "tidal-fold-scan-transposes, tidal-lower-to-scf, tidal-fuse-into-step-slices, tidal-parallelism-to-threads, tidal-aten-calls-to-runtime, tidal-scalarize-0d, canonicalize, tidal-fold-into-matmul, tidal-transposes-to-generics, tidal-hide-contractions, "
    "func.func(linalg-fuse-elementwise-ops), tidal-restore-contractions, "
    "canonicalize, cse, tidal-fold-into-matmul, canonicalize, "
    "tidal-fast-math, tidal-reassociate-reductions, tidal-vectorize, tidal-tile-elementwise, func.func(loop-invariant-code-motion), tidal-concat-in-place, canonicalize, "
    f"tidal-accumulate-into-sliced-inputs, {BUFFERIZE}, tidal-results-to-arguments, buffer-deallocation-pipeline, convert-bufferization-to-memref, "
    "func.func(refback-munge-memref-copy), canonicalize, "
    "tidal-matmul-to-blas, tidal-parallelize-generics, tidal-forall-to-threads, tidal-split-large-functions, scf-forall-to-for, "
    "func.func(tm-tensor-to-loops), func.func(convert-linalg-to-loops), convert-vector-to-scf, tidal-hoist-stack-slots, convert-scf-to-cf, "
    "expand-strided-metadata, lower-affine, convert-vector-to-llvm, finalize-memref-to-llvm{use-generic-functions=true}, tidal-huge-page-buffers, "
    "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}), "
    "math-extend-to-supported-types, arith-expand{include-bf16}, convert-math-to-llvm, "
    "convert-math-to-libm, convert-arith-to-llvm, convert-ub-to-llvm, convert-func-to-llvm, convert-cf-to-llvm, "
    "reconcile-unrealized-casts, tidal-prefer-wide-vectors, tidal-contract-exact-multiply-adds, tidal-llvm-contract, tidal-soft-bf16",
)


@tidal_pass("tidal-read-only-arguments", "Mark every function argument bufferization.writable = false")
def read_only_arguments(module_op):
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name != "func.func" or not len(op.regions[0].blocks):
            continue
        n = len(op.regions[0].blocks[0].arguments)
        old = list(ir.ArrayAttr(op.attributes["arg_attrs"])) if "arg_attrs" in op.attributes else [None] * n
        attrs = []
        for a in old:
            entries = {} if a is None else {na.name: na.attr for na in ir.DictAttr(a)}
            entries["bufferization.writable"] = ir.BoolAttr.get(False)
            attrs.append(ir.DictAttr.get(entries))
        op.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


@tidal_pass("tidal-llvm-contract", "Check that only the LLVM dialect remains (ready for the JIT)")
def llvm_contract(module_op):
    from tidal.diagnostics import TidalUnsupported

    bad = []

    def visit(op):
        if op.name.split(".", 1)[0] not in ("llvm", "builtin"):
            bad.append(op)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    if bad:
        raise TidalUnsupported(f"'{bad[0].name}' op could not be lowered to LLVM", bad[0].location)
    _check_stack_slots(module_op)


def _check_stack_slots(module_op):
    """Every `llvm.alloca` is in its function's entry block (or the function saves and restores
    its stack): one elsewhere sits in a loop or may, and would grow the stack on every iteration
    until the thread's stack overflows (`tidal-hoist-stack-slots`)."""
    from tidal.diagnostics import TidalUnsupported

    for fn in module_op.regions[0].blocks[0].operations:
        if fn.operation.name != "llvm.func" or not len(fn.regions[0].blocks):
            continue
        entry, stray, scoped = fn.regions[0].blocks[0], [], False

        def visit(op):
            nonlocal scoped
            scoped = scoped or op.name == "llvm.intr.stacksave"
            if op.name == "llvm.alloca" and op.operation.block != entry:
                stray.append(op)
            return ir.WalkResult.ADVANCE

        fn.operation.walk(visit)
        if stray and not scoped:
            raise TidalUnsupported("a stack slot outside the entry block would be allocated again on every "
                                   "iteration of the loop around it (the stack grows with the trip count)", stray[0].location)


def mark_entry(module: ir.Module, func_name: str) -> None:
    """Ask func-to-llvm for the C interface (`_mlir_ciface_<name>`) the runtime calls."""
    function_named(module, func_name).attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()


def codegen_fingerprint() -> str:
    """What names this code generator in a compiled-artifact cache key (`tidal.runtime.cache`):
    the hash of its sources, and the gemm choice (TIDAL_GEMM changes the code, not the IR)."""
    from tidal.backends.cpu import gemm_kernel

    return f"{_sources_fingerprint()}\0gemm_kernel={gemm_kernel.wanted()}"


@functools.lru_cache(maxsize=1)
def _sources_fingerprint() -> str:
    """A hash of the code that turns linalg into machine code (tidal's backends, conversions and
    runtime): an entry compiled by other code (an edited pass in a checkout) is never reused.
    Same version string, different code is the normal state of a development tree."""
    import tidal.backends
    import tidal.conversion
    import tidal.runtime

    h = hashlib.sha256()
    for package in (tidal.backends, tidal.conversion, tidal.runtime):
        root = os.path.dirname(package.__file__)
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), "rb") as f:
                        h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()
