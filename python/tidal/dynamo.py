"""`torch.compile(model, backend="tidal")`: Dynamo graphs compiled to native code.

Dynamo hands the backend a torch-level FX graph in which `cond`, `while_loop`, `scan` and `map`
are HOPs. The backend returns a callable that, per input signature (shapes, dtypes, non-tensor
values), re-exports the graph with torch.export (giving aten ops + HOPs), compiles it through
tidal, and caches the result: dynamic shapes are handled by specializing and caching.

Anything tidal cannot compile runs in eager for that graph, with ONE warning naming the op and
its source line — never a wrong result.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections import OrderedDict

import torch

from tidal.diagnostics import TidalError

__all__ = ["TidalFallbackWarning", "tidal_backend"]

MAX_SPECIALIZATIONS = 8
_graph_ids = itertools.count()


class TidalFallbackWarning(UserWarning):
    """A graph runs in eager PyTorch because tidal cannot compile it."""


def _signature(args) -> tuple:
    return tuple(
        (tuple(a.shape), a.dtype, a.device.type, a.requires_grad) if isinstance(a, torch.Tensor) else (type(a), a)
        for a in args
    )


class TidalCompiledGraph:
    """What the backend returns to Dynamo: compiles lazily per input signature."""

    def __init__(self, gm: torch.fx.GraphModule, options: dict):
        self.gm = gm
        self.options = options
        self.graph_id = next(_graph_ids)
        self.programs: OrderedDict = OrderedDict()
        self.fallback_reason: str | None = None
        self.compilations = 0

    def __call__(self, *args):
        if self.fallback_reason is not None:
            return self.gm(*args)
        reason = self._unsupported_call(args)
        if reason is not None:
            return self._fall_back(reason, args)
        key = _signature(args)
        program = self.programs.get(key)
        if program is None:
            try:
                program = self._compile(args)
            except Exception as exc:  # noqa: BLE001 - any failure means eager, with one warning
                return self._fall_back(_describe(exc), args)
            self.programs[key] = program
            if len(self.programs) > MAX_SPECIALIZATIONS:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(key)
        return program(*args)

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

    def _compile(self, args):
        from tidal.compiler import compile_exported
        from tidal.importer import export_program

        dump_dir = self.options.get("dump_dir") or os.environ.get("TIDAL_DUMP_DIR")
        if dump_dir:
            dump_dir = os.path.join(dump_dir, f"graph{self.graph_id}-{self.compilations}")
            os.makedirs(dump_dir, exist_ok=True)
            with open(os.path.join(dump_dir, "fx_graph.py"), "w") as f:
                f.write(self.gm.code)
        self.compilations += 1
        # Non-tensor inputs (sizes Dynamo made symbolic, Python scalars) are baked in: the
        # signature key includes their values, so each value gets its own specialization.
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        gm, frozen = self.gm, list(args)

        def tensors_only(*tensors):
            full = list(frozen)
            for i, t in zip(positions, tensors):
                full[i] = t
            # Interpreting node by node (with preserve_node_meta below) carries each Dynamo
            # node's stack trace into the exported graph, so diagnostics name the user's lines.
            return torch.fx.Interpreter(gm).run(*full)

        with warnings.catch_warnings(), torch.fx.traceback.preserve_node_meta():
            warnings.simplefilter("ignore", FutureWarning)
            ep = export_program(tensors_only, tuple(args[i] for i in positions))
        return compile_exported(ep, dump_dir=dump_dir)

    def _fall_back(self, reason: str, args):
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
