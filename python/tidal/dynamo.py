"""`torch.compile(model, backend="tidal")`: Dynamo graphs compiled to native code.

Dynamo hands the backend a torch-level FX graph in which `cond`, `while_loop`, `scan` and `map`
are HOPs. aot_autograd (the path Inductor takes) traces it ONCE more, with Dynamo's own fake
tensors and symbolic sizes, into an aten-level graph that keeps the HOPs and their subgraphs,
applies the decomposition table and removes mutation; tidal compiles that graph on its first
call. There is no second `torch.export`: sizes Dynamo made symbolic stay symbolic (one program
for all sizes), and Python ints, SymInts and SymBools at control-flow boundaries become 0-d
tensors inside the program (`tidal.importer.scalars`). Dynamo recompiles on its own guards, so
each graph tidal sees is compiled once.

Training (inputs or parameters that require grad): aot_autograd traces the joint graph, with
tidal's reverse-mode rules for the control-flow HOPs (`tidal.autodiff`), and tidal compiles its
forward (outputs + residuals) and backward (residuals + cotangents → gradients) programs; an
autograd.Function runs them. Under `torch.no_grad()` one inference program is compiled.

Anything tidal cannot compile runs in eager for that graph (the aten graph, run by PyTorch), with
ONE warning naming the op and its source line — never a wrong result. In strict mode
(`options={"fallback": "error"}` or `TIDAL_FALLBACK=error`) it raises `TidalCompileError`
instead: a test or benchmark that expects tidal to compile must not pass by running eager.
"""

from __future__ import annotations

import copy
import itertools
import os
import re
import warnings

import torch
import torch._dynamo.exc

from tidal.diagnostics import TidalError

__all__ = ["TidalCompileError", "TidalFallbackWarning", "tidal_backend"]

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


def scan_checkpoint_option(options: dict) -> int:
    """`options["scan_checkpoint"]` (k: a differentiated scan keeps the carry of every k-th step
    and recomputes the steps between in the backward), else `$TIDAL_SCAN_CHECKPOINT`, else 1."""
    from tidal.tracing import checked_checkpoint

    return checked_checkpoint(options.get("scan_checkpoint", os.environ.get("TIDAL_SCAN_CHECKPOINT", 1)))


def _device(example_inputs) -> str:
    """cuda when any tensor input is on a CUDA device (0-d CPU scalars may ride along)."""
    return "cuda" if any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs) else "cpu"


def _unsupported_inputs(example_inputs) -> str | None:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    devices = {str(t.device) for t in tensors if t.dim() > 0 or t.device.type != "cpu"}  # cuda:0 and cuda:1 differ
    if len(devices) > 1:
        return f"inputs on several devices ({', '.join(sorted(devices))})"
    for t in tensors:
        if t.device.type not in ("cpu", "cuda"):
            return f"inputs on {t.device} (tidal runs CPU tensors, and CUDA tensors through Triton)"
        if t.layout != torch.strided:
            return f"{t.layout} tensors"
        if t.is_quantized:
            return "quantized tensors"
        if t.is_complex():
            return f"complex dtype {t.dtype}"
    return None


# Dynamo's own control flow, raised through a backend (a restart with scalars made tensors), not failures
DYNAMO_SIGNALS = (torch._dynamo.exc.RestartAnalysis, torch._dynamo.exc.SkipFrame)


class _Fallback:
    """Runs a graph in eager PyTorch; warns once (or raises, in strict mode) when first called."""

    _boxed_call = True

    def __init__(self, run, reason: str, strict: bool, cause: BaseException | None = None):
        self.run = run
        self.reason = reason
        self.strict = strict
        self.cause = cause
        self.warned = False

    def __call__(self, args):
        if self.strict:
            raise TidalCompileError(self.reason) from self.cause
        self.warn_once()
        return self.run(args)

    def warn_once(self) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"tidal cannot compile this graph ({self.reason}); it runs in eager PyTorch",
                TidalFallbackWarning,
                stacklevel=3,
            )


class TidalCompiledGraph:
    """aot_autograd's forward graph, compiled by tidal on its first call (boxed calling
    convention: one list of tensors and scalars in, a list of results out)."""

    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, strict: bool, dump_dir: str | None):
        # An instance attribute as well: aot_autograd wraps the backward in functions that copy
        # the instance's __dict__, and checks `_boxed_call` on the wrapper.
        self._boxed_call = True
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.strict = strict
        self.dump_dir = dump_dir
        self.program = None
        self.fallback: _Fallback | None = None

    def __call__(self, args):
        if self.program is None and self.fallback is None:
            self._compile()
            if self.program is not None:
                return self._first_call(args)
        if self.fallback is not None:
            return self.fallback(args)
        return self.program(args)

    def _first_call(self, args):
        """The program's first run is the last stage that can fail for tidal's own reasons (a
        kernel built or loaded lazily, a runtime symbol): when it raises and eager runs the same
        arguments, the graph falls back for good. When eager raises too, the error is the
        input's (an index out of range), and the program stays."""
        kept = list(args)  # a boxed callee may clear its argument list
        try:
            return self.program(args)
        except Exception as exc:  # noqa: BLE001 - decided by what eager does with the same inputs
            try:
                results = self._eager(kept)
            except Exception:  # noqa: BLE001
                raise exc from None
            self.program = None
            self.fallback = _Fallback(self._eager, _describe(exc, self.gm, "its first call"), self.strict, cause=exc)
            if self.strict:
                self.fallback(kept)  # raises TidalCompileError
            self.fallback.warn_once()
            return results

    def unboxed(self):
        """This graph as a `(*args)` callable for Dynamo to call without aot_autograd's wrapper
        (`_aot_wrapper_is_identity`): once compiled, a call is one frame in front of the
        program's entry."""
        def first_call(*args):
            results = self(list(args))
            if self.program is not None and self.program.direct_entry is not None:
                current[0] = self.program.direct_entry
            else:
                current[0] = lambda *a: self(list(a))
            return results

        current = [first_call]
        return lambda *args: current[0](*args)

    def _compile(self) -> None:
        from tidal.compiler import compile_graph_module

        # Compile a copy: tidal's FX passes rewrite the graph (and its signature) in place, and
        # the eager fallback runs the original.
        gm = copy.deepcopy(self.gm)
        try:
            self.program = compile_graph_module(gm, self.example_inputs, dump_dir=self.dump_dir, device=_device(self.example_inputs))
        except DYNAMO_SIGNALS:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure means eager, with one warning
            self.fallback = _Fallback(self._eager, _describe(exc, self.gm), self.strict, cause=exc)

    def _eager(self, args):
        return _run_eager(self.gm, args)


def _run_eager(gm, args):
    """Run a graph tidal traced in eager PyTorch: its associative_scan HOPs hold per-slice combines."""
    from tidal.importer.associative_scan_capture import eager_associative_scan

    with eager_associative_scan():
        return gm(*args)


def _describe(exc: BaseException, gm: torch.fx.GraphModule | None = None, stage: str | None = None) -> str:
    """What failed, located: a TidalError or an MLIR diagnostic carries the op's line; any other
    exception is tidal's own failure, placed at the graph's first control-flow op (else its first
    op) in the user's source, so a user can say which code to keep out of torch.compile."""
    if isinstance(exc, TidalError):
        return exc.format()
    from torch_mlir import ir

    if isinstance(exc, ir.MLIRError):
        from tidal.diagnostics import diagnostics_from_mlir_error

        return "; ".join(d.format() for d in diagnostics_from_mlir_error(exc)[:2])
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    during = f" during {stage}" if stage else ""
    where = _graph_location(gm) if gm is not None else None
    if where is None:
        return f"internal error in tidal{during}: {type(exc).__name__}: {first}"
    op, loc = where
    return f"{loc}: error: internal error in tidal{during}, compiling the graph of the {op} here: {type(exc).__name__}: {first}"


_STACK_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _graph_location(gm: torch.fx.GraphModule) -> tuple[str, str] | None:
    """(op, FILE:LINE) of the graph's first control-flow op with a source line, else its first op
    with one: the innermost frame of the node's stack trace is the user's line."""
    located = []
    for node in gm.graph.nodes:
        frames = _STACK_FRAME.findall(node.meta.get("stack_trace") or "")
        if node.op == "call_function" and frames:
            file, line = frames[-1]
            is_hop = isinstance(node.target, torch._ops.HigherOrderOperator)
            located.append((not is_hop, _op_name(node.target), f"{file}:{line}"))
    if not located:
        return None
    _, op, loc = min(located, key=lambda entry: entry[0])  # stable: the first of its kind
    return op, loc


def _op_name(target) -> str:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return {"cond": "torch.cond"}.get(target.name(), target.name())
    return str(getattr(target, "__name__", target))


def tidal_backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The `torch.compile` backend registered as "tidal"."""
    options = dict(options or {})
    strict = fallback_mode(options) == "error"  # an unknown mode is refused here, not at a call
    checkpoint = scan_checkpoint_option(options)
    try:
        return _compile_dynamo_graph(gm, example_inputs, options, strict, checkpoint)
    except DYNAMO_SIGNALS:
        raise
    except Exception as exc:  # noqa: BLE001 - nothing tidal does may fail a program eager runs
        return _eager_graph(gm, _describe(exc, gm), strict, cause=exc)


def _compile_dynamo_graph(gm, example_inputs, options: dict, strict: bool, checkpoint: int):
    from torch._dynamo.backends.common import aot_autograd

    from tidal.importer.capture import decomposition_table

    reason = _unsupported_inputs(example_inputs)
    if reason is not None:  # devices, layouts: eager (autograd included) on Dynamo's own graph
        return _eager_graph(gm, reason, strict)
    dump_dir = options.get("dump_dir") or os.environ.get("TIDAL_DUMP_DIR")
    if dump_dir:
        dump_dir = os.path.join(dump_dir, f"graph{next(_graph_ids)}")
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, "fx_graph.py"), "w") as f:
            f.write(gm.code)

    # Training compiles two programs per graph (aot_autograd's forward and backward): each dumps
    # into its own folder.
    training = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)

    unwrapped: list[TidalCompiledGraph] = []

    def compiler_for(part: str):
        where = os.path.join(dump_dir, part) if dump_dir and training else dump_dir

        def compile_part(aten_gm, aten_inputs):
            graph = TidalCompiledGraph(aten_gm, aten_inputs, strict, where)
            if not training and _aot_wrapper_is_identity(aten_gm, len(example_inputs)):
                unwrapped.append(graph)
            return graph

        return compile_part

    from tidal.importer.rnn import rnns_as_scans
    from tidal.tracing import tracing_for_tidal

    gm = rnns_as_scans(gm)  # nn.LSTM/GRU/RNN (Dynamo's allow_rnn): one scan per layer and direction
    # aot_autograd traces the joint forward+backward graph now (training) or the inference graph:
    # the control-flow HOPs differentiate with tidal's rules (tidal.autodiff).
    # A rule that refuses the graph (or fails) while aot_autograd traces it: the caller's eager graph.
    with tracing_for_tidal(scan_checkpoint=checkpoint):
        wrapped = aot_autograd(
            fw_compiler=compiler_for("forward"),
            bw_compiler=compiler_for("backward"),
            decompositions=decomposition_table(),
        )(gm, example_inputs)
    return unwrapped[0].unboxed() if unwrapped else wrapped


def _aot_wrapper_is_identity(aten_gm, dynamo_inputs: int) -> bool:
    """Whether aot_autograd's runtime wrapper around this inference graph would only pass
    Dynamo's arguments in and the graph's results out: no argument deduplicated or added (RNG
    state, effect tokens), no input mutation to write back, every output a fresh tensor (no
    alias of an input or of another output to regenerate), no tensor subclass, autocast off,
    no grad-mode change. Then Dynamo calls tidal's program directly: the wrapper cost 1.5 us of
    a 12 us call of a small graph."""
    from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None or torch._C._is_any_autocast_enabled():
        return False
    placeholders = sum(1 for n in aten_gm.graph.nodes if n.op == "placeholder")
    return (
        placeholders == dynamo_inputs
        and not meta.mutated_inp_runtime_indices
        and not meta.mutated_graph_handled_indices
        and all(o.output_type == OutputType.non_alias for o in meta.output_info)
        and meta.num_intermediate_bases == 0
        and not meta.tokens
        and not meta.is_rng_op_functionalized
        and meta.num_graphsafe_rng_states == 0
        and not meta.dynamic_outputs
        and meta.grad_enabled_mutation is None
        and all(isinstance(m, (int, PlainTensorMeta)) for m in meta.subclass_inp_meta)
    )


def _eager_graph(gm, reason: str, strict: bool, cause: BaseException | None = None):
    """Dynamo's own graph run by PyTorch (autograd included), with one warning (strict: raises)."""
    fallback = _Fallback(lambda args: _run_eager(gm, args), reason, strict, cause=cause)
    return lambda *args: fallback(list(args))


def training_ir(fn, *args, stage: str = "torch") -> tuple[str, str]:
    """The forward and backward programs tidal compiles to train `fn` on `args` (sum of its float
    outputs as the loss), as IR at `stage` (`torch`, `tidal`, `linalg`, `llvm`): for reading what
    the autodiff rules generate, and for IR tests."""
    import tempfile
    from pathlib import Path

    import torch.utils._pytree as pytree

    from tidal.compiler import stage_names

    index = stage_names().index(stage)
    with tempfile.TemporaryDirectory() as dump:
        compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"fallback": "error", "dump_dir": dump})
        outs = pytree.tree_leaves(compiled(*args))
        sum(o.sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad).backward()
        (graph,) = Path(dump).glob("graph*")
        return tuple((graph / part / f"{index:02d}-{stage}.mlir").read_text() for part in ("forward", "backward"))


def register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    from tidal import tracing
    from tidal.autodiff import install_autodiff_rules
    from tidal.importer.associative_scan_capture import install_dynamo_polyfill

    # Before Dynamo traces anything for this backend: generic associative_scan stays one HOP, and
    # the control-flow HOPs differentiate with tidal's rules (in Dynamo's fake-tensor runs too),
    # which know a graph Dynamo builds for `tidal_backend` as tidal's (`tidal_is_tracing`).
    tracing.register_backend(tidal_backend)
    install_dynamo_polyfill()
    install_autodiff_rules()
    if "tidal" not in _BACKENDS:
        register_backend(name="tidal")(tidal_backend)


register()
