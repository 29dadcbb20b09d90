"""`torch.compile(model, backend="tidal")`: Dynamo graphs compiled to native code.

Dynamo hands the backend a torch-level FX graph in which `cond`, `while_loop`, `scan` and `map`
are HOPs. The backend returns a callable that, per input signature (shapes, dtypes, non-tensor
values), re-exports the graph with torch.export (giving aten ops + HOPs), compiles it through
tidal, and caches the result: dynamic shapes are handled by specializing and caching.

Anything tidal cannot compile runs in eager for that graph, with ONE warning naming the op and
its source line — never a wrong result. In strict mode (`options={"fallback": "error"}` or
`TIDAL_FALLBACK=error`) it raises `TidalCompileError` instead: a test or benchmark that expects
tidal to compile must not pass by running eager.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections import OrderedDict

import torch

from tidal.diagnostics import TidalError

__all__ = ["TidalCompileError", "TidalFallbackWarning", "tidal_backend"]

MAX_SPECIALIZATIONS = 8
_graph_ids = itertools.count()


class TidalFallbackWarning(UserWarning):
    """A graph runs in eager PyTorch because tidal cannot compile it."""


class TidalCompileError(RuntimeError):
    """Strict mode: tidal cannot compile a graph, and eager fallback was not allowed.

    `reason` names the op and the user's source line, as the fallback warning would.
    """

    def __init__(self, reason: str):
        super().__init__(f"tidal cannot compile this graph (strict mode, fallback='error'): {reason}")
        self.reason = reason


FALLBACK_MODES = ("warn", "error")


def fallback_mode(options: dict) -> str:
    """`options["fallback"]`, else `$TIDAL_FALLBACK`, else "warn"."""
    mode = options.get("fallback") or os.environ.get("TIDAL_FALLBACK") or "warn"
    if mode not in FALLBACK_MODES:
        raise ValueError(f"tidal: fallback must be one of {', '.join(FALLBACK_MODES)}, got {mode!r}")
    return mode


def _signature(args) -> tuple:
    return tuple(
        (tuple(a.shape), a.dtype, a.device.type, a.requires_grad) if isinstance(a, torch.Tensor) else (type(a), a)
        for a in args
    )


def symbolic_inputs(gm: torch.fx.GraphModule):
    """Where Dynamo made sizes symbolic: ({tensor input: [dims]}, {int input: (tensor input, dim)}).

    None when there is nothing symbolic, or when an int input is not simply a size of some tensor
    input (then it cannot be recomputed from the tensors, and tidal specializes instead).
    """
    values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    dims: dict[int, list[int]] = {}
    size_of: dict[str, tuple[int, int]] = {}
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            for d, size in enumerate(v.shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    dims.setdefault(i, []).append(d)
                    size_of.setdefault(str(size), (i, d))
    ints: dict[int, tuple[int, int]] = {}
    for i, v in enumerate(values):
        if isinstance(v, torch.SymInt):
            if str(v) not in size_of:
                return None
            ints[i] = size_of[str(v)]
        elif v is not None and not isinstance(v, torch.Tensor):
            return None
    return (dims, ints) if dims else None


class TidalCompiledGraph:
    """What the backend returns to Dynamo: compiles lazily per input signature.

    When Dynamo has made some sizes symbolic (it does so after seeing a second shape), tidal first
    tries ONE program with those dims dynamic (`?` in the IR); if that cannot be compiled, it
    specializes per input signature and caches each program.
    """

    def __init__(self, gm: torch.fx.GraphModule, options: dict):
        self.gm = gm
        self.options = options
        self.strict = fallback_mode(options) == "error"
        self.graph_id = next(_graph_ids)
        self.programs: OrderedDict = OrderedDict()
        self.fallback_reason: str | None = None
        self.compilations = 0
        self.symbolic = symbolic_inputs(gm)
        self.dynamic_program = None  # compiled once for all sizes of the symbolic dims

    def __call__(self, *args):
        if self.fallback_reason is not None:
            return self.gm(*args)
        reason = self._unsupported_call(args)
        if reason is not None:
            return self._fall_back(reason, args)
        if self.symbolic is not None and all(
            args[i].shape[d] >= 2 for i, ds in self.symbolic[0].items() for d in ds
        ):
            if self.dynamic_program is None:
                try:
                    self.dynamic_program = self._compile(args, dynamic=True)
                except Exception:  # noqa: BLE001 - not compilable for symbolic sizes: specialize
                    self.symbolic = None
            if self.dynamic_program is not None:
                return self.dynamic_program.call_flat([a for a in args if isinstance(a, torch.Tensor)])
        key = _signature(args)
        program = self.programs.get(key)
        if program is None:
            try:
                program = self._compile(args)
            except Exception as exc:  # noqa: BLE001 - any failure means eager, with one warning
                return self._fall_back(_describe(exc), args, cause=exc)
            self.programs[key] = program
            if len(self.programs) > MAX_SPECIALIZATIONS:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(key)
        return program.call_flat([a for a in args if isinstance(a, torch.Tensor)])

    def _unsupported_call(self, args) -> str | None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return (
                "training (inputs that require grad) is not supported yet: tidal's autodiff lands "
                "with the autodiff issue; run inference under torch.no_grad()"
            )
        for t in tensors:
            if t.device.type != "cpu":
                return f"inputs on {t.device} (the CPU backend runs CPU tensors)"
            if t.layout != torch.strided:
                return f"{t.layout} tensors"
            if t.is_quantized:
                return "quantized tensors"
            if t.is_complex():
                return f"complex dtype {t.dtype}"
        return None

    def _compile(self, args, dynamic: bool = False):
        from torch.export import Dim

        from tidal.compiler import compile_exported
        from tidal.importer import export_program

        dump_dir = self.options.get("dump_dir") or os.environ.get("TIDAL_DUMP_DIR")
        if dump_dir:
            dump_dir = os.path.join(dump_dir, f"graph{self.graph_id}-{self.compilations}")
            os.makedirs(dump_dir, exist_ok=True)
            with open(os.path.join(dump_dir, "fx_graph.py"), "w") as f:
                f.write(self.gm.code)
        self.compilations += 1
        # Specialized: non-tensor inputs (symbolic sizes, Python scalars) are baked in, and the
        # signature key includes their values. Dynamic: each symbolic size is recomputed from the
        # tensor dim it names, so it stays symbolic through export.
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        gm, frozen = self.gm, list(args)
        dims, ints = self.symbolic if dynamic else ({}, {})

        def tensors_only(*tensors):
            full = list(frozen)
            for i, t in zip(positions, tensors):
                full[i] = t
            for i, (t, d) in ints.items():
                full[i] = full[t].shape[d]
            # Interpreting node by node (with preserve_node_meta below) carries each Dynamo
            # node's stack trace into the exported graph, so diagnostics name the user's lines.
            return torch.fx.Interpreter(gm).run(*full)

        dynamic_shapes = None
        if dynamic:
            dynamic_shapes = tuple({d: Dim.DYNAMIC for d in dims[i]} if i in dims else None for i in positions)
        with warnings.catch_warnings(), torch.fx.traceback.preserve_node_meta():
            warnings.simplefilter("ignore", FutureWarning)
            ep = export_program(tensors_only, tuple(args[i] for i in positions), dynamic_shapes=dynamic_shapes)
        return compile_exported(ep, dump_dir=dump_dir)

    def _fall_back(self, reason: str, args, cause: BaseException | None = None):
        if self.strict:
            raise TidalCompileError(reason) from cause
        self.fallback_reason = reason
        warnings.warn(
            f"tidal cannot compile this graph ({reason}); it runs in eager PyTorch",
            TidalFallbackWarning,
            stacklevel=2,
        )
        return self.gm(*args)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TidalError):
        return exc.format()
    from torch_mlir import ir

    if isinstance(exc, ir.MLIRError):
        from tidal.diagnostics import diagnostics_from_mlir_error

        return "; ".join(d.format() for d in diagnostics_from_mlir_error(exc)[:2])
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


def tidal_backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The `torch.compile` backend registered as "tidal"."""
    return TidalCompiledGraph(gm, dict(options or {}))


def register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "tidal" not in _BACKENDS:
        register_backend(name="tidal")(tidal_backend)


register()
