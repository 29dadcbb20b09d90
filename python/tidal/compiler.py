"""Staged compilation: a program is imported once and lowered stage by stage.

Stages, in order (each names the IR a user can print with `tidal-compile --emit STAGE`):
  torch   the importer's output: torch dialect aten ops + tidal region ops on !torch.vtensor
  tidal   after torch-level simplification (op variants, decompositions): what tidal's own
          passes see before aten ops are lowered
  linalg  linalg/tensor/arith/math + tidal ops on builtin tensors (tidal-backend-contract holds)
  llvm    the LLVM dialect, loops included (tidal → scf → bufferized memrefs → LLVM)
"""

from __future__ import annotations

import os
import warnings

from torch_mlir import ir

import tidal.init_all  # noqa: F401  (registers every pass, pipeline and op rule)
from tidal.passes import run_pipeline
from tidal.passes.registry import function_named

STAGES: list[tuple[str, str | None]] = [
    ("torch", None),
    ("tidal", "tidal-torch-simplify"),
    ("linalg", "tidal-torch-to-linalg-from-simplified"),
    ("llvm", "tidal-linalg-to-llvm"),
]


def stage_names() -> list[str]:
    return [name for name, _ in STAGES]


def lower(module: ir.Module, context: ir.Context, to: str, start: str = "torch", dump_dir: str | None = None) -> ir.Module:
    """Run the pipelines that take `module` (at stage `start`) to stage `to`, in place."""
    names = stage_names()
    if to == "llvm":
        from tidal.backends.cpu import mark_entry

        with context:
            for op in module.body.operations:
                if op.operation.name == "func.func" and len(op.regions[0].blocks):  # not declarations
                    mark_entry(module, ir.StringAttr(op.attributes["sym_name"]).value)
    if to not in names:
        raise ValueError(f"unknown stage '{to}' (stages: {', '.join(names)})")
    begin, end = names.index(start), names.index(to)
    if end < begin:
        raise ValueError(f"cannot lower from stage '{start}' back to '{to}'")
    if dump_dir:
        _dump(dump_dir, begin, start, module)
    for i in range(begin + 1, end + 1):
        name, pipeline = STAGES[i]
        with context:
            run_pipeline(module.operation, f"builtin.module({pipeline})", context)
        if dump_dir:
            _dump(dump_dir, i, name, module)
    return module


def _dump(dump_dir: str, index: int, stage: str, module: ir.Module) -> None:
    os.makedirs(dump_dir, exist_ok=True)
    with open(os.path.join(dump_dir, f"{index:02d}-{stage}.mlir"), "w") as f:
        f.write(str(module))


class CompiledProgram:
    """A program compiled to native code, called like the original (pytrees in and out)."""

    def __init__(self, native, out_spec, num_tensor_inputs: int):
        self.native = native
        self.out_spec = out_spec
        self.num_tensor_inputs = num_tensor_inputs

    def __call__(self, *args, **kwargs):
        import torch
        import torch.utils._pytree as pytree

        flat = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        return self.call_flat(flat)

    def call_flat(self, tensors):
        """The fast path for callers that already hold the flat tensor inputs (the Dynamo backend)."""
        import torch.utils._pytree as pytree

        outs = self.native(*tensors)
        return pytree.tree_unflatten(outs, self.out_spec) if self.out_spec is not None else outs


def compile_exported(ep, func_name: str = "main", dump_dir: str | None = None) -> CompiledProgram:
    """Import an ExportedProgram, lower it to LLVM and JIT it (or load it from the cache)."""
    import torch

    from tidal.diagnostics import TidalUnsupported
    from tidal.importer import import_exported

    mutated = dict(ep.graph_signature.user_inputs_to_mutate) | dict(ep.graph_signature.buffers_to_mutate)
    if mutated:
        raise TidalUnsupported(
            f"the program mutates its inputs or buffers in place ({', '.join(sorted(mutated.values()))}); "
            f"tidal compiles functional programs only"
        )
    (output,) = [n for n in ep.graph.nodes if n.op == "output"]
    for value in output.args[0]:
        if not (isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor)):
            kind = type(value.meta.get("val") if isinstance(value, torch.fx.Node) else value).__name__
            raise TidalUnsupported(f"the program returns a {kind}; tidal compiles programs whose outputs are tensors")
    native = native_function(import_exported(ep, func_name), dump_dir)
    return CompiledProgram(native, ep.call_spec.out_spec, len(native.args))


def native_function(prog, dump_dir: str | None = None, output_aliases: list[str] | None = None):
    """Lower an imported program to native code, or load it from the cache (in memory, on disk).

    `output_aliases` (see `tidal.backends.cpu.forwarded_results`) lets the runtime hand out an input
    or an earlier result where an output is a view of it, instead of a copy."""
    from tidal.backends.cpu import codegen_fingerprint
    from tidal.backends.cpu.forwarded_results import ALLOWED, forwarded_results
    from tidal.runtime import NativeFunction, cache, signature_of

    func_name = prog.func_name
    lower(prog.module, prog.context, "linalg", dump_dir=dump_dir)
    with prog.context:
        if output_aliases:
            function_named(prog.module, func_name).attributes[ALLOWED] = ir.ArrayAttr.get([ir.StringAttr.get(a) for a in output_aliases])
            run_pipeline(prog.module.operation, "builtin.module(tidal-forward-aliased-results)", prog.context)
        args, results = signature_of(prog.module, func_name)
        forwarded = forwarded_results(function_named(prog.module, func_name))
    key = cache.cache_key(str(prog.module), func_name, _pipeline_text("llvm"), codegen_fingerprint())
    native = cache.lookup(key, func_name)
    if native is None:
        lower(prog.module, prog.context, "llvm", start="linalg", dump_dir=dump_dir)
        with prog.context:
            native = NativeFunction.from_llvm_module(prog.module, func_name, args, results)
        cache.stats.compiles += 1
        cache.store(key, native, args, results)
        cache.remember(key, native)
    elif dump_dir:  # a cache hit still dumps every stage, for the user inspecting the IR
        lower(prog.module, prog.context, "llvm", start="linalg", dump_dir=dump_dir)
    native.forwarded = forwarded
    return native


def gpu_function(prog, dump_dir: str | None = None):
    """Lower an imported program to a GPU program: Triton kernels and the host plan around them."""
    from tidal.backends.gpu import GPU_PREPARE, GPU_TORCH_LEVEL
    from tidal.backends.gpu.aten_fallback import origins, tag_origins, with_aten_calls
    from tidal.backends.gpu.program import GpuProgram
    from tidal.diagnostics import TidalError, TidalPerformanceWarning, TidalUnsupported

    lower(prog.module, prog.context, "tidal", dump_dir=dump_dir)
    with prog.context:
        run_pipeline(prog.module.operation, f"builtin.module({GPU_TORCH_LEVEL})", prog.context)
        torch_level = tag_origins(prog.module)
    as_calls: set[int] = set()
    while True:  # an op the plan refuses: the aten ops it came from run as ATen calls, and again
        lower(prog.module, prog.context, "linalg", start="tidal", dump_dir=dump_dir)
        try:
            with prog.context:
                run_pipeline(prog.module.operation, f"builtin.module({GPU_PREPARE.text})", prog.context)
                program = GpuProgram(prog.module, prog.func_name, keep_alive=prog)
            break
        except TidalUnsupported as exc:
            tags = origins(exc.location) - as_calls
            if not tags:
                raise
            with prog.context:
                module, converted = with_aten_calls(torch_level, prog.context, as_calls | tags)
            if not converted - as_calls:
                raise
            as_calls |= converted
            prog.module = module
    for location, why in {(str(loc), why): (loc, why) for loc, why in program.builder.step_by_step}.values():
        warnings.warn(TidalError("tidal runs this scan on the GPU one step at a time (kernel launches every step, "
                                 f"not one kernel for the loop): {why}", location).format("warning"),
                      TidalPerformanceWarning, stacklevel=2)
    if dump_dir:
        _dump(dump_dir, len(STAGES), "gpu", prog.module)
        for kernel in program.kernels_for_emit():
            with open(os.path.join(dump_dir, f"{kernel.name}.{kernel.stage}"), "w") as f:
                f.write(kernel.text)
    return program


class GraphProgram:
    """A compiled aten-level graph called with the graph's own (boxed) arguments: tensors and
    scalars in, tensors and Python scalars out (`BoundaryPlan`)."""

    def __init__(self, native, plan):
        self.native = native
        self.plan = plan
        # Tensors in and out, in order (the common case): no per-call reshuffling.
        self._as_is = (plan.inputs == [("tensor", k) for k in range(len(plan.inputs))]
                       and all(kind == "tensor" for kind in plan.outputs))
        entry = getattr(native, "entry", None)
        self._entry = entry() if entry is not None else native

    @property
    def direct_entry(self):
        """What runs the program on exactly the graph's arguments, passed as separate arguments
        (None when the boundary reshuffles them: scalars in or out)."""
        return self._entry if self._as_is else None

    def __call__(self, args):
        if self._as_is and len(args) == len(self.plan.inputs):
            return self._entry(*args)
        return self.plan.results(self.native(*self.plan.arguments(args)))


def compile_graph_module(gm, example_inputs, dump_dir: str | None = None, device: str = "cpu") -> GraphProgram:
    """Compile an aten-level FX graph with the control-flow HOPs kept (aot_autograd's forward
    graph of a Dynamo graph): no second export, so Dynamo's symbolic sizes, Python-int carries
    and shape predicates reach tidal as they are, as 0-d tensors at the boundaries."""
    import torch

    from tidal.importer import import_graph_module
    from tidal.importer.capture import rewrite_contiguous_as_strided
    from tidal.importer.reduced_precision import compute_reduced_precision_in_float32
    from tidal.importer.scalars import tensorize_scalars

    fake_mode = torch._guards.detect_fake_mode(example_inputs) or torch._subclasses.FakeTensorMode()
    rewrite_contiguous_as_strided(gm)
    compute_reduced_precision_in_float32(gm)
    plan = tensorize_scalars(gm, fake_mode)
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, "aten_graph.py"), "w") as f:
            f.write(gm.print_readable(print_output=False))
    if device == "cuda":
        host_results = _host_results(gm)
        _device_agnostic(gm)
        program = gpu_function(import_graph_module(gm), dump_dir)
        program.host_results = host_results
        if torch.cuda.is_available():  # its kernels compile in workers while Dynamo and AOTAutograd go on
            program.launcher.prefetch(_example_device(example_inputs))
        return GraphProgram(program, plan)
    from tidal.backends.cpu.forwarded_results import output_aliases

    return GraphProgram(native_function(import_graph_module(gm), dump_dir, output_aliases(gm)), plan)


def _example_device(example_inputs) -> int:
    """The GPU the graph's example tensors are on (the current one where none is)."""
    import torch

    for t in example_inputs:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            return t.device.index if t.device.index is not None else torch.cuda.current_device()
    return torch.cuda.current_device()


def _host_results(gm) -> list[int]:
    """The results eager leaves on the CPU (a 0-d CPU tensor carried through a loop on CUDA
    data, as a counter), by position among the graph's tensor results: the GPU program returns
    them there too."""
    import torch
    import torch.utils._pytree as pytree

    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    results = [v for v in pytree.tree_leaves(output.args) if isinstance(v, torch.fx.Node)]
    vals = [r.meta.get("val") for r in results]
    return [i for i, v in enumerate(vals) if isinstance(v, torch.Tensor) and v.device.type == "cpu"]


_CUDA_ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                   "_scaled_dot_product_cudnn_attention")


def _attention_as_one_op(graph_module) -> None:
    """A CUDA fused attention whose only result used is the output (inference) becomes the
    composite `scaled_dot_product_attention`, which runs as one ATen call on the stream (ATen
    picks the same fused kernel). The fused variants' other results (philox seeds as uint64,
    sizes, None) have no tensor type tidal could carry; in training they are used, and the
    graph falls back."""
    import operator

    import torch
    from torch.fx.operator_schemas import normalize_function

    for node in list(graph_module.graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target.namespace != "aten" or target._schema.name.split("::", 1)[1] not in _CUDA_ATTENTION:
            continue
        users = list(node.users)
        if not users or not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue
        args = normalize_function(target, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
        if args.get("dropout_p", 0.0) != 0.0:
            continue
        with graph_module.graph.inserting_before(node):
            sdpa = graph_module.graph.call_function(
                torch.ops.aten.scaled_dot_product_attention.default,
                (args["query"], args["key"], args["value"]),
                {"attn_mask": args.get("attn_bias"), "is_causal": args.get("is_causal", False), "scale": args.get("scale")},
            )
        sdpa.meta = {**node.meta, "val": node.meta["val"][0]} if "val" in node.meta else dict(node.meta)
        for u in users:
            u.replace_all_uses_with(sdpa)
            graph_module.graph.erase_node(u)
        graph_module.graph.erase_node(node)


def _device_agnostic(gm) -> None:
    """Where tensors live is the backend's business, not the IR's: the graph's `device=cuda`
    arguments become the CPU that torch-mlir's lowerings know, and device moves become dtype
    conversions (the GPU backend allocates every tensor on the device)."""
    import torch
    import torch.utils._pytree as pytree

    def host(v):
        return torch.device("cpu") if isinstance(v, torch.device) else v

    # the control-flow HOPs' bodies are submodules of their own
    for graph_module in [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule)]:
        _attention_as_one_op(graph_module)
        for node in graph_module.graph.nodes:
            if node.op != "call_function":
                continue
            node.args = pytree.tree_map(host, node.args)
            node.kwargs = pytree.tree_map(host, node.kwargs)
            if node.target is torch.ops.aten.to.device:  # (self, device, dtype, non_blocking, copy, memory_format)
                node.target = torch.ops.aten.to.dtype
                node.args = (node.args[0], *node.args[2:])
                node.kwargs = {k: v for k, v in node.kwargs.items() if k != "device"}
        graph_module.recompile()


def _pipeline_text(stage: str) -> str:
    from tidal.passes.registry import lookup_pipeline

    return lookup_pipeline(dict(STAGES)[stage]).text


def compile_program(
    model, example_inputs: tuple, dump_dir: str | None = None, dynamic_shapes=None
) -> CompiledProgram:
    """Export `model` on `example_inputs` (control-flow HOPs kept) and compile it for the CPU.

    `dynamic_shapes` (torch.export's spec) makes dims symbolic: one program serves all sizes.
    """
    from tidal.importer import export_program

    return compile_exported(export_program(model, example_inputs, dynamic_shapes=dynamic_shapes), dump_dir=dump_dir)
