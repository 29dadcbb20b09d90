"""A compiled tidal program: native code behind a torch-tensor calling convention."""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import threading

import torch
from torch._C import _len_torch_dispatch_stack as _python_dispatch_modes
from torch._C._dynamo.guards import _empty_strided_cpu
from torch.utils._python_dispatch import _disable_current_modes
from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine

from tidal.runtime import errors, externs
from tidal.runtime.memref import (
    HUGE_PAGE,
    MLIR_TO_TORCH,
    advise_huge_pages,
    TensorSig,
    contiguous_strides,
    descriptor_type,
    fill_descriptor,
    free_all,
    results_as_arguments,
    results_type,
    take_result,
)


def signature_of(module: ir.Module, func_name: str) -> tuple[list[TensorSig], list[TensorSig]]:
    """Argument and result signatures of a linalg-level (builtin tensor) function."""
    from tidal.passes.registry import function_named

    ftype = ir.FunctionType(ir.TypeAttr(function_named(module, func_name).attributes["function_type"]).value)
    return [_sig(t) for t in ftype.inputs], [_sig(t) for t in ftype.results]


def _sig(t: ir.Type) -> TensorSig:
    if not isinstance(t, ir.RankedTensorType):
        raise TypeError(f"tidal compiles functions over ranked tensors, got {t}")
    elt = str(t.element_type)
    if elt not in MLIR_TO_TORCH:
        raise TypeError(f"element type {elt} is not supported by the CPU runtime")
    shape = tuple(None if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank))
    return TensorSig(MLIR_TO_TORCH[elt], shape)


# LLVM's -O2 rather than -O3: the code tidal hands LLVM is already tiled and vectorized, and O3's
# extra passes (non-trivial loop unswitching, argument promotion, larger inlining) cost compile
# time without changing run time. Straight-line bench programs, one thread, O3 and O2 processes
# alternated three times: compile of the encoder layer 1.78-1.87 -> 1.22-1.25 s, conv block
# 1.07-1.12 -> 0.99 s, RNN cell x8 0.70-0.72 -> 0.66 s; 512-step unrolled RNN 27.4 -> 25.8 s. Run
# times equal within noise: RNN cell x8 0.096-0.097 vs 0.095-0.098 ms, encoder 1.09-1.13 vs
# 1.10-1.14 ms, conv 1.63-1.70 vs 1.61-1.69 ms, RNN scan T=128 1.216 vs 1.225 ms.
JIT_OPT_LEVEL = 2


class NativeFunction:
    """Calls a compiled `_mlir_ciface_<name>` on torch tensors.

    `bind(descriptors)` returns a callable that runs the code on those (ctypes) structs, in the
    C interface's order, through its packed wrapper (`_packed_binder`; the JIT's or a cached
    shared library's); `keepalive` holds what owns the code. Each thread fills its own
    descriptors, made and bound once, those of static shapes complete but for the data pointer:
    a call writes a few fields and enters the code, with no ctypes objects made per call.

    With every result of static shape (`results_as_arguments`), the outputs are torch tensors
    allocated here and passed after the inputs; otherwise the code returns descriptors of memory
    it allocated, which the results adopt or copy (`take_result`).

    `forwarded` (set by the compiler, `tidal-forward-aliased-results`) puts back the results the
    code does not return: an input tensor or an earlier result, handed out as it is.

    `static` (all-static signatures, `add_static_entry`): the code as a C function of one data
    pointer per argument and result, which `entry()` calls with no descriptor at all.
    """

    def __init__(self, bind, keepalive, args: list[TensorSig], results: list[TensorSig], static=None):
        self.bind = bind
        self.keepalive = keepalive
        self.static = static
        self.args = args
        self.results = results
        self.results_as_arguments = results_as_arguments(results)
        self._static_args = [s.is_static for s in args]
        # What a well-formed argument looks like, checked in one expression per argument.
        self._expected = [(s.dtype, torch.Size(s.shape) if s.is_static else None) for s in args]
        self._new_results = [_result_allocator(s) for s in results] if self.results_as_arguments else []
        self._per_thread = threading.local()
        self.forwarded: list[tuple[str, int] | None] | None = None

    @classmethod
    def from_llvm_module(cls, llvm_module: ir.Module, func_name: str, args, results, opt_level: int = JIT_OPT_LEVEL):
        has_static = add_static_entry(llvm_module, func_name, args + results)
        engine = ExecutionEngine(llvm_module, opt_level=opt_level, shared_libs=[])
        for name, address in externs.addresses().items():
            engine.raw_register_runtime(name, ctypes.c_void_p(address))
        errors.install(engine.raw_lookup(errors.ERROR_HOOK_SETTER))
        # raw_lookup(n) finds the symbol `_mlir_` + n: the packed C interface, the static entry itself
        packed = engine.raw_lookup(f"_mlir_ciface_{func_name}")
        if not packed:
            raise RuntimeError(f"compiled module has no function {func_name}")
        static = _static_function(engine.raw_lookup(STATIC_ENTRY + func_name), len(args) + len(results)) if has_static else None
        return cls(_packed_binder(packed), engine, args, results, static)

    @classmethod
    def from_shared_library(cls, path: str, func_name: str, args, results):
        lib = ctypes.CDLL(path)
        setter = getattr(lib, f"_mlir_{errors.ERROR_HOOK_SETTER}", None)
        errors.install(ctypes.cast(setter, ctypes.c_void_p).value if setter is not None else None)
        packed = ctypes.cast(getattr(lib, f"_mlir__mlir_ciface_{func_name}"), ctypes.c_void_p).value
        static = getattr(lib, f"_mlir_{STATIC_ENTRY}{func_name}", None)
        static = _static_function(ctypes.cast(static, ctypes.c_void_p).value, len(args) + len(results)) if static is not None else None
        return cls(_packed_binder(packed), lib, args, results, static)

    def _bound(self):
        state = getattr(self._per_thread, "state", None)
        if state is None:
            inputs = [_descriptor(s) for s in self.args]
            if self.results_as_arguments:
                out, outputs = None, [_descriptor(s) for s in self.results]
                run = self.bind(inputs + outputs)
            else:
                out, outputs = results_type(self.results)(), []
                run = self.bind([out, *inputs])
            state = self._per_thread.state = (inputs, outputs, out, run)
        return state

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        if len(tensors) != len(self.args):
            raise TypeError(f"expected {len(self.args)} tensors, got {len(tensors)}")
        if _python_dispatch_modes():
            # The ATen calls of the native code are the program's own, not ops of the caller's:
            # a Python dispatch mode (aot_autograd's first-call aliasing check, a user's) would see
            # each one, and an error raised inside the mode stays set on the thread, so the error
            # hook (Python) cannot record it and the call returned a wrong answer.
            with _disable_current_modes():
                return self.__call__(*tensors)
        inputs, outputs, out, run = self._bound()
        keep = tensors if self._well_formed(tensors) else [
            self._check_arg(i, t, sig) for i, (t, sig) in enumerate(zip(tensors, self.args))]
        for d, t, static in zip(inputs, keep, self._static_args):
            if static:
                d.allocated = d.aligned = t.data_ptr()
            else:
                fill_descriptor(d, t)
        if self.results_as_arguments:
            results = [new() for new in self._new_results]
            for d, r in zip(outputs, results):
                d.allocated = d.aligned = r.data_ptr()
            run()
            errors.raise_pending()
        else:
            run()
            errors.raise_pending()
            results = self._take_results(out, keep)
        return results if self.forwarded is None else _with_forwarded(self.forwarded, results, keep)

    def entry(self):
        """`__call__` for callers that pass exactly `len(self.args)` tensors. With every argument
        and result of static shape it is straight-line code made for this signature: no loop,
        zip or bound method runs per call, and the code is entered through its static entry
        (`add_static_entry`: the data pointers as arguments, no descriptor written). For a
        while_loop's three 0-d/[4] arguments and two results (n = 0): 1.70 us, against 3.4
        through `__call__`.

        The arguments are checked by one call of Dynamo's C++ tensor check (`TensorGuards`):
        class, dtype, device, dispatch keys, requires_grad, sizes and strides against the
        compiled signature, 0.15 us for three tensors where the same checks as Python
        expressions take 0.6. Its dispatch keys are read in the thread-local state of the call
        that made the entry: a call in another state (inference mode entered or left), with a
        tensor that requires grad or with strides other than the contiguous ones it expects
        takes the Python expressions, and anything they do not accept takes `__call__`."""
        if not (all(self._static_args) and self.results_as_arguments):
            return self.__call__
        names = [f"a{i}" for i in range(len(self.args))]
        outs = [f"r{j}" for j in range(len(self.results))]
        env = {"_checked": self.__call__, "_local": self._per_thread, "_bound": self._bound, "_errors": errors,
               "_with_forwarded": _with_forwarded, "_forwarded": self.forwarded, "_static": self.static}
        checks = []
        for i, (a, (dtype, shape)) in enumerate(zip(names, self._expected)):
            env[f"_S{i}"], env[f"_D{i}"] = shape, dtype
            checks.append(f"{a}.shape != _S{i} or {a}.dtype is not _D{i} or not {a}.is_cpu or not {a}.is_contiguous()")
        lines = [f"def entry({', '.join(names)}):", "    if _modes():", f"        return _checked({', '.join(names)})"]
        env["_modes"] = _python_dispatch_modes
        if checks:
            env["_as_compiled"] = _tensor_check(self.args)
            python_checks = ["try:", f"    unexpected = {' or '.join(checks)}",
                             "except AttributeError:  # not a tensor: the checked call says which",
                             "    unexpected = True",
                             "if unexpected:", f"    return _checked({', '.join(names)})"]
            if env["_as_compiled"] is None:
                lines += [f"    {line}" for line in python_checks]
            else:
                lines += [f"    if not _as_compiled({', '.join(names)}):"] + [f"        {line}" for line in python_checks]
        for j, r in enumerate(outs):
            env[f"_new{j}"] = self._new_results[j]
            lines.append(f"    {r} = _new{j}()")
        if self.static is not None:  # no descriptors: one data pointer per tensor
            lines.append(f"    _static({', '.join(f'{t}.data_ptr()' for t in names + outs)})")
        else:
            lines += ["    try:", "        ins, outs, _, run = _local.state", "    except AttributeError:",
                      "        ins, outs, _, run = _bound()"]
            lines += [f"    d = ins[{i}]; d.allocated = d.aligned = {a}.data_ptr()" for i, a in enumerate(names)]
            lines += [f"    d = outs[{j}]; d.allocated = d.aligned = {r}.data_ptr()" for j, r in enumerate(outs)]
            lines.append("    run()")
        lines += ["    if _errors._unraised:", "        _errors.raise_pending()"]
        results = f"[{', '.join(outs)}]"
        lines.append(f"    return {results}" if self.forwarded is None
                     else f"    return _with_forwarded(_forwarded, {results}, ({', '.join(names)}{',' if names else ''}))")
        exec(compile("\n".join(lines), f"<tidal entry of {len(names)} arguments>", "exec"), env)
        return env["entry"]

    def _take_results(self, out, keep: list[torch.Tensor]) -> list[torch.Tensor]:
        spans = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in keep]
        adopted: set[int] = set()

        def owned_elsewhere(ptr: int) -> bool:
            if ptr in adopted or any(lo <= ptr < lo + n for lo, n in spans):
                return True
            adopted.add(ptr)
            return False

        to_free: list[int] = []
        try:
            if len(self.results) == 1:
                return [take_result(out, self.results[0], owned_elsewhere, to_free)]
            return [take_result(getattr(out, f"r{i}"), s, owned_elsewhere, to_free) for i, s in enumerate(self.results)]
        finally:
            free_all(to_free)

    def _well_formed(self, tensors) -> bool:
        """The common case, decided without a call per argument: CPU tensors of the compiled
        static shapes and dtypes, contiguous. Anything else takes `_check_arg`."""
        try:
            for t, (dtype, shape) in zip(tensors, self._expected):
                if t.shape != shape or t.dtype is not dtype or not t.is_cpu or not t.is_contiguous():
                    return False
        except AttributeError:  # not a tensor: _check_arg says which
            return False
        return True

    def _check_arg(self, i: int, t: torch.Tensor, sig: TensorSig) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"argument {i} must be a tensor, got {type(t).__name__}")
        if t.dtype != sig.dtype:
            raise TypeError(f"argument {i} has dtype {t.dtype}, compiled for {sig.dtype}")
        if not t.is_cpu:
            raise TypeError(f"argument {i} is on {t.device}; the CPU backend needs CPU tensors")
        if not _shape_matches(t, sig):
            raise TypeError(f"argument {i} has shape {tuple(t.shape)}, compiled for {sig.shape}")
        return t if t.is_contiguous() else t.contiguous()


# The static entry of function `f` is the symbol `_mlir_tidal_static_f`: the name the JIT's
# raw_lookup("tidal_static_f") resolves (it prefixes `_mlir_`), and a plain C symbol of a cached
# shared library.
STATIC_ENTRY = "tidal_static_"
# The most arguments of a C function ctypes calls (CPython's CTYPES_MAX_ARGCOUNT).
CTYPES_MAX_ARGS = 1024


def add_static_entry(llvm_module: ir.Module, func_name: str, sigs: list[TensorSig]) -> bool:
    """Add `_mlir_tidal_static_<func_name>(ptr, ...)` to an LLVM-dialect module: `<func_name>`
    called with one data pointer per memref argument, the rest of each descriptor (offset 0,
    sizes, contiguous strides) constants of the static signature `sigs` (arguments, then the
    result buffers). Calling it from Python costs one ctypes call with the data pointers, where
    the descriptors' C interface needs two pointer fields written per tensor first (entry of a
    while_loop's 3 arguments and 2 results: 0.71 -> 0.53 us for those steps).

    Adds nothing and returns False unless every shape is static, there are at most
    CTYPES_MAX_ARGS tensors, and `<func_name>` takes exactly the expanded descriptors of `sigs`
    and returns nothing (results passed as arguments)."""
    if not sigs or len(sigs) > CTYPES_MAX_ARGS or not all(s.is_static for s in sigs):
        return False
    target = next((op for op in llvm_module.body.operations if op.operation.name == "llvm.func"
                   and ir.StringAttr(op.attributes["sym_name"]).value == func_name), None)
    if target is None or not len(target.regions[0].blocks):
        return False
    expected, operands, constants = [], [], set()
    for i, s in enumerate(sigs):
        strides = contiguous_strides(s.shape)
        expected += ["!llvm.ptr", "!llvm.ptr"] + ["i64"] * (1 + 2 * s.rank)
        operands += [f"%p{i}", f"%p{i}", "%c0"] + [f"%c{v}" for v in (*s.shape, *strides)]
        constants.update((0, *s.shape, *strides))
    params = [str(a.type) for a in target.regions[0].blocks[0].arguments]
    if params != expected or not str(target.attributes["function_type"]).startswith("!llvm.func<void ("):
        return False
    types = ", ".join(expected)
    body = "\n".join(f"  %c{v} = llvm.mlir.constant({v} : i64) : i64" for v in sorted(constants))
    text = (f"llvm.func @{func_name}({types})\n"
            f"llvm.func @_mlir_{STATIC_ENTRY}{func_name}({', '.join(f'%p{i}: !llvm.ptr' for i in range(len(sigs)))}) {{\n"
            f"{body}\n  llvm.call @{func_name}({', '.join(operands)}) : ({types}) -> ()\n  llvm.return\n}}")
    with llvm_module.context:
        parsed = ir.Module.parse(text)  # (the declaration lets the call parse), alive until moved from
    wrapper = list(parsed.body.operations)[1]
    wrapper.operation.detach_from_parent()
    llvm_module.body.append(wrapper)
    return True


def _packed_binder(address: int):
    """`bind` for the packed C interface at `address` (`void(void** args)`, each slot pointing at
    one descriptor's address), which the JIT and a cached shared library both have. One pointer
    argument whatever the number of tensors: ctypes refuses C functions of more than
    CTYPES_MAX_ARGS arguments, which the plain C interface of a cached program with one
    argument per tensor would exceed past 1024 tensors."""
    packed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)

    def bind(descs):
        # table[i] points at a slot holding descriptor i's address; `table` keeps `slots` alive
        slots = (ctypes.c_void_p * len(descs))(*[ctypes.addressof(d) for d in descs])
        table = (ctypes.c_void_p * len(descs))(*[ctypes.addressof(slots) + i * ctypes.sizeof(ctypes.c_void_p)
                                                 for i in range(len(descs))])
        table._slots = slots
        return functools.partial(packed, table)

    return bind


def _static_function(address: int | None, count: int):
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * count)(address) if address else None


def _tensor_check(sigs: list[TensorSig]):
    """Dynamo's C++ check that tensors are plain CPU tensors of these dtypes, contiguous shapes
    and strides, not requiring grad, with the dispatch keys such tensors have in the current
    thread-local state: a function of the tensors returning a bool (False for a non-tensor).
    None where this torch has no such check (a private API): the Python checks do it all."""
    # The sizes and strides checked are the lists; an example gives the rest (empty: a large
    # argument's example would allocate its whole size).
    examples = [torch.empty(0, dtype=s.dtype) for s in sigs]
    try:
        from torch._C._dynamo.guards import TensorGuards

        check = TensorGuards(*examples, dynamic_dims_sizes=[list(s.shape) for s in sigs],
                             dynamic_dims_strides=[contiguous_strides(s.shape) for s in sigs]).check
    except (ImportError, TypeError, RuntimeError):
        return None
    return check


def _with_forwarded(plan, computed: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    computed = iter(computed)
    results: list[torch.Tensor] = []
    for p in plan:
        results.append(next(computed) if p is None else (inputs if p[0] == "arg" else results)[p[1]])
    return results


ADVISED_RESULT_BYTES = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX: always a fresh mapping


def _result_allocator(sig: TensorSig):
    """A function making a fresh contiguous tensor for a static result: the allocator Inductor's
    generated code calls (0.37 µs for a small tensor, where `empty_like` of an expanded 0-d
    template takes 0.70 and `torch.empty(shape, dtype=...)` 1.1: a small graph called in a loop
    allocates every result on every call). A large one is advised onto 2 MiB pages, as the
    compiled code's own large buffers are (`tidal-huge-page-buffers`): glibc maps it fresh on every
    call, and the code's first touch of it faulted once per 4 KiB (an LSTM's [512, 64, 256]
    output: 8192 faults, ~20 ms of a 185 ms forward). Only from glibc's largest mmap threshold
    on: a smaller buffer may be warm heap memory, which advising made slower to reuse (the linear
    recurrence [4, 4096, 256] training step, 16 MiB results: 22 -> 29 ms)."""
    new = functools.partial(_empty_strided_cpu, tuple(sig.shape), tuple(contiguous_strides(sig.shape)), sig.dtype)
    nbytes = math.prod(sig.shape) * sig.dtype.itemsize
    if nbytes < ADVISED_RESULT_BYTES or not sys.platform.startswith("linux"):
        return new

    def advised():
        t = new()
        start = -(-t.data_ptr() // HUGE_PAGE) * HUGE_PAGE
        end = (t.data_ptr() + nbytes) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            advise_huge_pages(start, end - start)
        return t

    return advised


def _shape_matches(t: torch.Tensor, sig: TensorSig) -> bool:
    if sig.is_static:
        return t.shape == sig.shape  # one comparison: the common case, on every call
    return t.dim() == sig.rank and all(s is None or s == d for s, d in zip(sig.shape, t.shape))


def _descriptor(sig: TensorSig):
    """A descriptor for `sig`; complete but for the data pointer when the shape is static."""
    d = descriptor_type(sig.rank)()
    if sig.is_static and sig.rank:
        d.shape[:] = list(sig.shape)
        d.strides[:] = contiguous_strides(sig.shape)
    return d

