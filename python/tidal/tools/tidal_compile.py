"""tidal-compile: compile a PyTorch program file with tidal and print its IR at a chosen stage.

FILE.py defines `model` (an nn.Module or callable) and `example_inputs` (a tuple). Errors are one
clear message naming the op and the user's source line, with exit code 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import sys
import warnings

from tidal.diagnostics import Diagnostic, SourceLoc, TidalError, diagnostics_from_exception
from tidal.tools import write_output


def load_program_file(path: str):
    """(model, example_inputs) of FILE.py."""
    module = load_program_module(path)
    inputs = module.example_inputs
    return module.model, inputs if isinstance(inputs, tuple) else (inputs,)


_reloads = itertools.count(1)


def load_program_module(path: str):
    """Import FILE.py as a real module (runpy breaks Dynamo for control-flow ops: FOUNDATION.md),
    checking that it defines `model` and `example_inputs`."""
    name = "tidal_user_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    if name in sys.modules:  # loaded before: a module of its own (Dynamo guards globals through the module's name)
        name += f"_{next(_reloads)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TidalError(f"cannot load '{path}' as a Python module", None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        raise TidalError(f"the program file called sys.exit({e.code!r}) while being loaded", SourceLoc(path, 1, 1)) from None
    for attr in ("model", "example_inputs"):
        if not hasattr(module, attr):
            raise TidalError(f"{path} must define `{attr}` (see tidal-compile --help)", SourceLoc(path, 1, 1))
    return module


def main(argv: list[str] | None = None) -> int:
    from tidal.compiler import stage_names

    p = argparse.ArgumentParser(
        prog="tidal-compile",
        description="Compile FILE.py (defining `model` and `example_inputs`) with tidal and print its IR.",
    )
    p.add_argument("file", help="Python file defining `model` and `example_inputs`")
    p.add_argument(
        "--emit",
        choices=[*stage_names(), *GPU_STAGES, "so"],
        default="linalg",
        help="stage to print (default: linalg); ttir, ttgir, llir and ptx print the GPU backend's kernels "
        "for --target (compiled with triton, no GPU needed); so writes a shared library with a C entry point "
        "to -o NAME.so and its header NAME.h beside it (FILE.py may define `dynamic_shapes`, torch.export's spec)",
    )
    p.add_argument("--target", default="cuda:90", help="GPU target of --emit ttir|ttgir|llir|ptx (default: cuda:90)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: stdout)")
    p.add_argument(
        "--run",
        action="store_true",
        help="compile for the CPU, run on example_inputs and compare with eager PyTorch (exit 1 on mismatch)",
    )
    args = p.parse_args(argv)

    try:
        if args.emit == "so":
            if args.output == "-":
                raise TidalError("--emit so writes a library: name it with -o NAME.so", None)
            text = export_file(args.file, args.output)
            args.output = "-"
        elif args.run:
            text = run_file(args.file)
        elif args.emit in GPU_STAGES:
            text = compile_file_for_gpu(args.file, args.emit, args.target)
        else:
            text = compile_file(args.file, args.emit)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure is reported as a diagnostic
        for d in _diagnostics(exc, args.file):
            print(d.format(), file=sys.stderr)
        return 1
    write_output(text, args.output)
    return 0


def _import_file(path: str):
    import tidal.init_all  # noqa: F401  (every op rule: autodiff's in the export's traces)
    from tidal.importer import import_program

    if not os.path.isfile(path):
        raise TidalError(f"no such file: {path}", SourceLoc(path, 1, 1))
    model, inputs = load_program_file(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return import_program(model, inputs)


def compile_file(path: str, emit: str) -> str:
    from tidal.compiler import lower

    prog = _import_file(path)
    lower(prog.module, prog.context, emit)
    return str(prog.module)


def export_file(path: str, library: str) -> str:
    """FILE.py as the shared library `library` and its header; returns a one-line report."""
    from tidal.aot import export

    if not os.path.isfile(path):
        raise TidalError(f"no such file: {path}", SourceLoc(path, 1, 1))
    module = load_program_module(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        export(module.model, module.example_inputs, library, dynamic_shapes=getattr(module, "dynamic_shapes", None), source=path)
    header = os.path.splitext(library)[0] + ".h"
    return f"wrote {library} and {header}\n"


GPU_STAGES = ("ttir", "ttgir", "llir", "ptx")


def compile_file_for_gpu(path: str, emit: str, target: str) -> str:
    """The GPU backend's kernels of FILE.py at `emit` for `target`, one after another."""
    from tidal.backends.gpu.triton_compile import kernel_asm, parse_target
    from tidal.compiler import gpu_function
    from tidal.diagnostics import TidalPerformanceWarning

    try:
        parsed = parse_target(target)
    except ValueError as exc:
        raise TidalError(str(exc), None) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalPerformanceWarning)
        program = gpu_function(_import_file(path))
    for w in caught:  # a performance warning as a compiler's diagnostic: FILE:LINE:COL: warning: ...
        if issubclass(w.category, TidalPerformanceWarning):
            sys.stderr.write(f"{w.message}\n")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    parts = []
    for kernel in program.kernels_for_emit():
        parts.append(f"// kernel {kernel.name} ({emit}, {target})\n{kernel_asm(kernel, emit, parsed)}")
    return "\n".join(parts) if parts else f"// no kernels: {path} runs as library calls only\n"


def run_file(path: str) -> str:
    """Compile FILE.py natively, run it, and report max error against eager and the timings."""
    import time

    import torch
    import torch.utils._pytree as pytree

    from tidal.compiler import compile_program

    if not os.path.isfile(path):
        raise TidalError(f"no such file: {path}", SourceLoc(path, 1, 1))
    model, inputs = load_program_file(path)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", FutureWarning)
        start = time.perf_counter()
        program = compile_program(model, inputs)
        compile_s = time.perf_counter() - start
        expected = model(*inputs)
        got = program(*inputs)
        eager_s = _median_seconds(lambda: model(*inputs))
        tidal_s = _median_seconds(lambda: program(*inputs))
    pairs = list(zip(pytree.tree_leaves(got), pytree.tree_leaves(expected)))
    errors = [(g.double() - e.double()).abs().max().item() if g.numel() else 0.0 for g, e in pairs]
    try:
        torch.testing.assert_close(got, expected)
        verdict = "matches eager"
    except AssertionError as e:
        raise TidalError(f"tidal's result differs from eager PyTorch: {str(e).strip().splitlines()[0]}") from None
    return (
        f"{path}: {verdict} (max abs error {max(errors, default=0.0):.3g} over {len(pairs)} outputs)\n"
        f"compile {compile_s:.2f} s; eager {eager_s * 1e3:.3f} ms, tidal {tidal_s * 1e3:.3f} ms "
        f"({eager_s / tidal_s:.2f}x eager)\n"
    )


def _median_seconds(fn, repeats: int = 7) -> float:
    import time

    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _diagnostics(exc: BaseException, path: str) -> list[Diagnostic]:
    from torch_mlir import ir

    if isinstance(exc, (TidalError, ir.MLIRError)):
        return [
            d if d.loc is not None else Diagnostic(d.severity, d.message, SourceLoc(path, 1, 1))
            for d in diagnostics_from_exception(exc)
        ]
    # A failure inside torch.export or the user's own code: name the innermost user frame.
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == os.path.abspath(path)]
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    loc = SourceLoc(path, frames[-1].lineno, 1) if frames else SourceLoc(path, 1, 1)
    if isinstance(exc, SystemExit):
        return [Diagnostic("error", f"the program called sys.exit({exc.code!r})", loc)]
    return [Diagnostic("error", f"{type(exc).__name__}: {first_line}", loc)]


def entry() -> None:
    try:
        code = main()
    except KeyboardInterrupt:
        print("tidal-compile: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    entry()
