"""AOT export: a program as a native shared library with a plain C entry point, no Python at run time.

`tidal.export(model, example_inputs, "model.so", dynamic_shapes=...)` (or `tidal-compile FILE.py
--emit so -o model.so`) compiles the whole program, loops included, exactly as the JIT does, and
links the machine code with a small generated C wrapper into `model.so`; `model.h` declares the
entry points and documents every input and output (dtype, shape, which dims are dynamic).

The C interface (NAME is the library's stem):
  - `int NAME_run(const tidal_tensor *inputs, tidal_tensor *outputs)`: inputs are contiguous
    row-major data with their sizes (a dynamic dim takes any size, a static one is checked);
    each output gets a buffer from malloc (the caller frees it) and its sizes. 0 on success, else
    nonzero with the reason in `NAME_last_error()`.
  - `NAME_num_inputs()`, `NAME_input_info(i)` (and for outputs): names, dtypes, ranks, static sizes.

A program that calls ATen (an op tidal runs through the dispatcher) links libtorch_cpu, as
AOTInductor's packages do; one that calls only BLAS links libtorch_cpu for its `sgemm_`/`dgemm_`
(MKL inside; the header says so, any Fortran BLAS serves); one that calls neither needs only the C
library. The code is what the JIT runs, so an export matches the in-process results bit for bit.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import torch

from tidal.diagnostics import TidalError

# MLIR element type → (C type, name in the header and the info table)
_C_TYPES = {
    "f32": ("float", "float32"),
    "f64": ("double", "float64"),
    "f16": ("uint16_t", "float16"),
    "bf16": ("uint16_t", "bfloat16"),
    "i64": ("int64_t", "int64"),
    "i32": ("int32_t", "int32"),
    "i16": ("int16_t", "int16"),
    "i8": ("int8_t", "int8"),
    "i1": ("uint8_t", "bool"),
}
_LIBC = {"malloc", "free", "aligned_alloc", "madvise", "malloc_usable_size", "memcpy", "memmove", "memset", "abort"}
MAX_RANK = 8


class ExportError(TidalError):
    pass


@dataclass
class Port:
    """One input or output of the exported function."""

    name: str
    elt: str  # MLIR element type
    dims: list  # int, or a str naming a dynamic dim ("s0", "u0")

    @property
    def c_type(self) -> str:
        return _C_TYPES[self.elt][0]

    @property
    def dtype(self) -> str:
        return _C_TYPES[self.elt][1]

    @property
    def rank(self) -> int:
        return len(self.dims)

    def shape_text(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"


def c_identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"m_{name}"


def export(model, example_inputs: tuple, path: str, dynamic_shapes=None, name: str | None = None,
           source: str | None = None) -> str:
    """Compile `model` on `example_inputs` into the shared library `path` and its header (same
    stem, `.h`). `dynamic_shapes` is torch.export's spec; `name` prefixes the C functions (default:
    the library's stem); `source` is named in the header. Returns the library's path."""
    import tidal.init_all  # noqa: F401  (every op rule: autodiff's in the export's traces)
    from tidal.importer import export_program

    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    ep = export_program(model, example_inputs, dynamic_shapes=dynamic_shapes)
    return export_program_to_library(ep, path, name=name, source=source, dim_names=_dim_names(dynamic_shapes),
                                     input_names=_parameter_names(model))


def _parameter_names(model) -> list[str] | None:
    """A plain function's parameter names (torch.export calls them args_0, ...)."""
    import inspect

    if isinstance(model, torch.nn.Module) or not callable(model):
        return None
    try:
        return [p.name for p in inspect.signature(model).parameters.values()]
    except (TypeError, ValueError):
        return None


def _dim_names(dynamic_shapes) -> dict[tuple[int, int], str]:
    """(input, dim) → the name of its torch.export.Dim, for a spec given per positional input."""
    names = {}
    if isinstance(dynamic_shapes, (tuple, list)):
        for i, spec in enumerate(dynamic_shapes):
            for d, dim in (spec.items() if isinstance(spec, dict) else ()):
                if hasattr(dim, "__name__"):
                    names[(i, d)] = dim.__name__
    return names


def export_program_to_library(
    ep, path: str, name: str | None = None, source: str | None = None, dim_names=None, input_names=None
) -> str:
    """The exported program `ep` as the library `path` and its header (see `export`)."""
    from tidal.compiler import lower
    from tidal.importer import import_exported
    from tidal.runtime import NativeFunction, signature_of

    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise ExportError("exporting a shared library needs a C compiler: none found (set $CC)")
    stem = os.path.splitext(os.path.basename(path))[0]
    name = c_identifier(name or stem)
    impl = f"{name}__program"
    inputs, outputs = _ports(ep)
    _rename_dims(inputs, outputs, dim_names or {})
    if input_names and len(input_names) == len(inputs):
        for p, label in zip(inputs, input_names):
            p.name = label
    prog = import_exported(ep, impl)
    lower(prog.module, prog.context, "linalg")
    with prog.context:
        args, results = signature_of(prog.module, impl)
    lower(prog.module, prog.context, "llvm", start="linalg")
    with prog.context:
        externals = _external_symbols(prog.module)
        native = NativeFunction.from_llvm_module(prog.module, impl, args, results)
    _check_ports(inputs, args, "input")
    _check_ports(outputs, results, "output")
    calls_aten = any(s.startswith(("aoti_torch_", "torch_")) for s in externals)
    calls_blas = sorted(s for s in externals if s in ("sgemm_", "dgemm_"))
    uses_openmp = any(s.startswith(("GOMP_", "omp_")) for s in externals)
    links_torch = calls_aten or bool(calls_blas) or uses_openmp
    out_dir = os.path.dirname(os.path.abspath(path))
    os.makedirs(out_dir, exist_ok=True)
    header_path = os.path.join(out_dir, f"{stem}.h")
    header = _header(name, inputs, outputs, _links_text(calls_aten, calls_blas, uses_openmp), source)
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "program.o")
        native.keepalive.dump_to_object_file(obj)
        wrapper = os.path.join(tmp, "wrapper.c")
        with open(header_path, "w") as f:
            f.write(header)
        with open(wrapper, "w") as f:
            f.write(_wrapper(name, impl, os.path.basename(header_path), inputs, outputs, args, results, calls_aten))
        exports = os.path.join(tmp, "exports.map")
        with open(exports, "w") as f:  # only NAME_* is visible: the program's own symbols stay inside
            f.write("{ global: " + f"{name}_*;" + " local: *; };\n")
        cmd = [cc, "-shared", "-fPIC", "-O2", f"-I{out_dir}", "-o", path, wrapper, obj, "-lm", f"-Wl,-soname,{stem}.so",
               f"-Wl,--version-script={exports}", "-Wl,-z,notext"]
        if links_torch:
            from tidal.runtime import externs

            cmd += [*externs.torch_link_flags(), "-lc10"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ExportError(f"linking {path} failed: {done.stderr.strip()}")
    return path


def _ports(ep) -> tuple[list[Port], list[Port]]:
    """Names, element types and shapes (dynamic dims by their symbol) of the user's inputs and
    outputs, from the exported program's example values."""
    sig = ep.graph_signature
    user_inputs = set(sig.user_inputs)
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user_inputs]
    (out,) = [n for n in ep.graph.nodes if n.op == "output"]
    user_outputs = [o for o, spec in zip(out.args[0], sig.output_specs) if spec.kind.name == "USER_OUTPUT"]

    from tidal.runtime.memref import MLIR_TO_TORCH

    torch_to_mlir = {dtype: elt for elt, dtype in MLIR_TO_TORCH.items()}  # what the runtime carries

    def port(label, node):
        val = node.meta["val"]
        if val.dtype not in torch_to_mlir:
            raise ExportError(f"{label} has dtype {val.dtype}, which the C interface does not carry")
        dims = [int(d) if not isinstance(d, torch.SymInt) or d.node.is_constant() else str(d) for d in val.shape]
        return Port(label, torch_to_mlir[val.dtype], dims)

    inputs = [port(p.name, p) for p in placeholders]
    outputs = [port(f"output{i}", o) for i, o in enumerate(user_outputs)]
    for p in inputs + outputs:
        if p.rank > MAX_RANK:
            raise ExportError(f"{p.name} has rank {p.rank}; the C interface carries at most {MAX_RANK} dims")
    return inputs, outputs


def _rename_dims(inputs: list[Port], outputs: list[Port], dim_names) -> None:
    """torch.export's symbols (s83) under the names the user gave them (T), everywhere they occur."""
    rename = {}
    for (i, d), label in dim_names.items():
        if i < len(inputs) and d < inputs[i].rank and isinstance(inputs[i].dims[d], str):
            rename[inputs[i].dims[d]] = label
    for p in inputs + outputs:
        p.dims = [rename.get(d, d) if isinstance(d, str) else d for d in p.dims]


def _check_ports(ports: list[Port], sigs, kind: str) -> None:
    if len(ports) != len(sigs):
        raise ExportError(f"the compiled function has {len(sigs)} {kind}s, the program {len(ports)}")
    for p, s in zip(ports, sigs):
        for i, (d, c) in enumerate(zip(p.dims, s.shape)):
            if c is None and isinstance(d, int):
                p.dims[i] = f"{p.name}_dim{i}"  # a size the compiled code left dynamic


def _external_symbols(module) -> list[str]:
    """Functions the LLVM module calls but does not define (outside the C library and libm)."""
    names = []
    for op in module.body.operations:
        if op.operation.name == "llvm.func" and len(op.regions[0].blocks) == 0:
            sym = str(op.attributes["sym_name"]).strip('"')
            if sym not in _LIBC:
                names.append(sym)
    return names


def _links_text(calls_aten: bool, calls_blas: list[str], uses_openmp: bool) -> str:
    parts = []
    if calls_aten:
        parts.append("libtorch_cpu and libc10 (ATen calls through the dispatcher's stable C ABI)")
    if calls_blas:
        parts.append(f"BLAS {', '.join(calls_blas)}, linked from libtorch_cpu (MKL inside; any Fortran BLAS such as "
                     f"-lopenblas provides the same symbols)")
    if uses_openmp:
        parts.append("OpenMP (libgomp, through libtorch_cpu) for its parallel loops: OMP_NUM_THREADS sets the threads")
    return "; ".join(parts) if parts else "the C library only"


_TYPES = """#ifndef TIDAL_TYPES_DEFINED
#define TIDAL_TYPES_DEFINED
#include <stdint.h>
#define TIDAL_MAX_RANK %d
/* A tensor passed to or returned by an exported tidal program: contiguous row-major data. */
typedef struct tidal_tensor {
  void *data;
  int64_t shape[TIDAL_MAX_RANK]; /* sizes of the first `rank` dims */
} tidal_tensor;
/* What an input or output is: shape[i] < 0 marks a dynamic dim. */
typedef struct tidal_tensor_info {
  const char *name;
  const char *dtype; /* "float32", "int64", "bool" (one byte), ... */
  int itemsize;
  int rank;
  int64_t shape[TIDAL_MAX_RANK];
} tidal_tensor_info;
#endif
""" % MAX_RANK


def _header(name: str, inputs: list[Port], outputs: list[Port], links: str, source) -> str:
    guard = f"TIDAL_{name.upper()}_H"

    def table(ports):
        return "\n".join(f" *   {i:<3} {p.name:<16} {p.dtype:<9} {p.shape_text()}" for i, p in enumerate(ports))

    dynamic = sorted({d for p in inputs + outputs for d in p.dims if isinstance(d, str)})
    lines = [
        f"/* {name}.h: generated by tidal.export{f' from {source}' if source else ''}; do not edit.",
        " *",
        f" * Inputs (contiguous row-major data the caller owns; tidal_tensor.shape holds the sizes):",
        table(inputs),
        " * Outputs (each .data from malloc: the caller frees it; .shape receives the sizes):",
        table(outputs),
        f" * Dynamic dims: {', '.join(dynamic) if dynamic else 'none'} (named dims take any size the program"
        " accepts; equal names are equal sizes; output sizes are known after the call).",
        f" * Links: {links}.",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        _TYPES,
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        f"#define {name.upper()}_NUM_INPUTS {len(inputs)}",
        f"#define {name.upper()}_NUM_OUTPUTS {len(outputs)}",
        f"/* Runs the program: 0 on success, else nonzero and {name}_last_error() says why. */",
        f"int {name}_run(const tidal_tensor *inputs, tidal_tensor *outputs);",
        f"/* The reason the last {name}_run of this thread failed (\"\" after a success). */",
        f"const char *{name}_last_error(void);",
        f"int {name}_num_inputs(void);",
        f"int {name}_num_outputs(void);",
        f"const tidal_tensor_info *{name}_input_info(int i);",
        f"const tidal_tensor_info *{name}_output_info(int i);",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


def _info_table(var: str, ports: list[Port]) -> str:
    rows = []
    for p in ports:
        dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in p.dims) or "0"
        rows.append(f'  {{"{p.name}", "{p.dtype}", sizeof({p.c_type}), {p.rank}, {{{dims}}}}}')
    body = ",\n".join(rows) if rows else '  {"", "", 0, 0, {0}}'
    return f"static const tidal_tensor_info {var}[] = {{\n{body}\n}};\n"


def _wrapper(name, impl, header, inputs, outputs, args, results, calls_aten) -> str:
    ranks = sorted({s.rank for s in [*args, *results]})
    descs = "\n".join(
        f"typedef struct {{ void *allocated, *aligned; int64_t offset; int64_t sizes[{r}], strides[{r}]; }} desc{r};"
        if r else "typedef struct { void *allocated, *aligned; int64_t offset; } desc0;"
        for r in ranks
    )
    from tidal.runtime.memref import results_as_arguments

    # The compiled entry either writes into output buffers passed after the inputs (every output
    # of static shape: allocated here, before the call) or returns descriptors (taken after it).
    passed_out = results_as_arguments(results)
    result_struct = "" if passed_out else (
        "typedef struct {\n" + "".join(f"  desc{s.rank} r{i};\n" for i, s in enumerate(results)) + "} results_t;"
    )
    params = ", ".join(([] if passed_out else ["results_t *"]) + [f"desc{s.rank} *" for s in [*args, *(results if passed_out else [])]])
    fill_inputs, checks = [], []
    for i, (p, s) in enumerate(zip(inputs, args)):
        for d, size in enumerate(s.shape):
            if size is not None:
                checks.append(
                    f"  if (inputs[{i}].shape[{d}] != {size}) return fail(\"input {i} ({p.name}): dim {d} is %lld, "
                    f"expected {size}\", (long long)inputs[{i}].shape[{d}]);"
                )
        fill_inputs.append(_fill_input(i, s.rank))
    if passed_out:
        call_args = ", ".join([f"&a{i}" for i in range(len(args))] + [f"&o{i}" for i in range(len(results))])
        before_call = "\n".join(_allocate_output(i, s) for i, s in enumerate(results))
        takes = ""
    else:
        call_args = ", ".join(["&res"] + [f"&a{i}" for i in range(len(args))])
        before_call = "  results_t res;"
        takes = "\n".join(
            f"  take(&outputs[{i}], res.r{i}.allocated, res.r{i}.aligned, res.r{i}.offset, "
            f"{'res.r%d.sizes' % i if s.rank else 'NULL'}, {s.rank}, sizeof({outputs[i].c_type}), inputs, "
            f"{len(args)}, taken, &n_taken, to_free, &n_free);"
            for i, s in enumerate(results)
        )
    hook = (
        "extern void tidal_set_error_hook(void (*)(const char *));\n"
        "extern const char *torch_exception_get_what_without_backtrace(void);\n"
        "static void on_error(const char *callee) {\n"
        "  if (!error[0]) snprintf(error, sizeof error, \"%s failed in compiled code: %s\", callee,\n"
        "                          torch_exception_get_what_without_backtrace());\n"
        "}\n"
        if calls_aten else ""
    )
    n_in, n_out = len(args), len(results)
    return f"""/* Generated by tidal.export: the plain C entry points of {name}.so around the compiled program. */
#include "{header}"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

{descs}
{result_struct}
extern void _mlir_ciface_{impl}({params});

static _Thread_local char error[512];
{hook}
static int fail(const char *fmt, ...) {{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error, sizeof error, fmt, ap);
  va_end(ap);
  return 1;
}}

/* A result the caller may free(): the program's own fresh allocation when it starts at the data
   and is returned once; otherwise (an input's storage, a constant, an aligned or offset view, a
   buffer returned twice) a copy. */
static void take(tidal_tensor *out, void *allocated, void *aligned, int64_t offset, const int64_t *sizes,
                 int rank, size_t itemsize, const tidal_tensor *inputs, int n_inputs, void **taken,
                 int *n_taken, void **to_free, int *n_free) {{
  size_t n = 1;
  for (int d = 0; d < rank; d++) {{
    out->shape[d] = sizes[d];
    n *= (size_t)sizes[d];
  }}
  char *data = (char *)aligned + offset * (int64_t)itemsize;
  int fresh = allocated != NULL && allocated != (void *)0xdeadbeef;
  for (int i = 0; fresh && i < n_inputs; i++)
    if (allocated == inputs[i].data) fresh = 0;
  int seen = 0;
  for (int i = 0; i < *n_taken; i++)
    if (taken[i] == allocated) seen = 1;
  if (fresh && !seen && (void *)data == allocated) {{
    out->data = allocated;
    taken[(*n_taken)++] = allocated;
    return;
  }}
  out->data = malloc(n * itemsize ? n * itemsize : 1);
  if (n) memcpy(out->data, data, n * itemsize);
  if (fresh && !seen) {{
    taken[(*n_taken)++] = allocated;
    to_free[(*n_free)++] = allocated;
  }}
}}

{_info_table("input_info", inputs)}
{_info_table("output_info", outputs)}
int {name}_num_inputs(void) {{ return {n_in}; }}
int {name}_num_outputs(void) {{ return {n_out}; }}
const tidal_tensor_info *{name}_input_info(int i) {{ return i >= 0 && i < {n_in} ? &input_info[i] : NULL; }}
const tidal_tensor_info *{name}_output_info(int i) {{ return i >= 0 && i < {n_out} ? &output_info[i] : NULL; }}
const char *{name}_last_error(void) {{ return error; }}

int {name}_run(const tidal_tensor *inputs, tidal_tensor *outputs) {{
  error[0] = 0;
  if (!inputs || !outputs) return fail("inputs and outputs must not be NULL");
{chr(10).join(checks)}
{chr(10).join(fill_inputs)}
  {"tidal_set_error_hook(on_error);" if calls_aten else ""}
{before_call}
  _mlir_ciface_{impl}({call_args});
  void *taken[{max(n_out, 1)}], *to_free[{max(n_out, 1)}];
  int n_taken = 0, n_free = 0;
{takes}
  for (int i = 0; i < n_free; i++) free(to_free[i]);
  if (error[0]) {{
    for (int i = 0; i < {n_out}; i++) {{ free(outputs[i].data); outputs[i].data = NULL; }}
    return 1;
  }}
  return 0;
}}
"""


def _allocate_output(i: int, sig) -> str:
    from tidal.runtime.memref import contiguous_strides

    lines = [f"  outputs[{i}].data = malloc({math.prod(sig.shape) * sig.itemsize or 1});",
             f"  if (!outputs[{i}].data) {{ for (int j = 0; j < {i}; j++) free(outputs[j].data); return fail(\"out of memory\"); }}",
             f"  desc{sig.rank} o{i} = {{outputs[{i}].data, outputs[{i}].data, 0}};"]
    for d, (size, stride) in enumerate(zip(sig.shape, contiguous_strides(sig.shape))):
        lines.append(f"  outputs[{i}].shape[{d}] = o{i}.sizes[{d}] = {size}; o{i}.strides[{d}] = {stride};")
    return "\n".join(lines)


def _fill_input(i: int, rank: int) -> str:
    lines = [f"  desc{rank} a{i};", f"  a{i}.allocated = a{i}.aligned = inputs[{i}].data;", f"  a{i}.offset = 0;"]
    if rank:
        lines.append(f"  for (int64_t d = {rank - 1}, stride = 1; d >= 0; d--) {{")
        lines.append(f"    a{i}.sizes[d] = inputs[{i}].shape[d];")
        lines.append(f"    a{i}.strides[d] = stride;")
        lines.append(f"    stride *= inputs[{i}].shape[d];")
        lines.append("  }")
    return "\n".join(lines)


__all__ = ["ExportError", "export", "export_program_to_library"]
