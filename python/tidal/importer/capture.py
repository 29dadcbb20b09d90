"""Capture a PyTorch program as an ExportedProgram whose control-flow operators stay HOPs.

torch.export keeps `cond`, `while_loop`, `scan` and `map` as higher-order ops; generic-mode
`associative_scan` is kept as one HOP by `keep_associative_scan()`
(`tidal.importer.associative_scan_capture`).
"""

from __future__ import annotations

import contextlib

import torch

from tidal.importer.associative_scan_capture import keep_associative_scan
from tidal.importer.fx_rewrite import rewrite_nodes
from tidal.importer.reduced_precision import compute_reduced_precision_in_float32


class _CallableModule(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


@contextlib.contextmanager
def record_full_user_stacks():
    """Keep every user frame below `forward` in node stack traces, not only `forward` frames.

    Non-strict export records only frames named `forward`, so an op in a helper function (or in a
    scan body) would be attributed to the line in `forward` that called it; diagnostics should
    name the op's own line.
    """
    from torch.fx.proxy import TracerBase

    original = TracerBase._filter_traceback_frames

    def all_user_frames(self, summary):
        was = self._record_forward_stack_traces_only
        self._record_forward_stack_traces_only = False
        try:
            return original(self, summary)
        finally:
            self._record_forward_stack_traces_only = was

    TracerBase._filter_traceback_frames = all_user_frames
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = original


# Kept whole: they run as ATen calls (tidal.conversion.aten_calls). Decomposed, attention inside a
# loop body changes the strides of a carry and torch's HOP check rejects the program.
_KEPT_WHOLE = ("aten.scaled_dot_product_attention.default", "aten._scaled_dot_product_flash_attention_for_cpu.default")


def decomposition_table():
    """torch-mlir's table, minus the ops tidal calls whole, plus PyTorch's own `gelu` (torch-mlir's
    tanh-GELU lowering uses 0.797724 for sqrt(2/pi): errors up to 5e-5) and `squeeze.dims` as a
    view."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = {op: fn for op, fn in get_decomposition_table().items() if str(op) not in _KEPT_WHOLE}
    table.update(torch._decomp.get_decompositions([torch.ops.aten.gelu]))
    table[torch.ops.aten.squeeze.dims] = _squeeze_dims
    table[torch.ops.aten.native_layer_norm.default] = _native_layer_norm
    table[torch.ops.aten.native_group_norm.default] = _native_group_norm
    table[torch.ops.aten._transformer_encoder_layer_fwd.default] = _transformer_encoder_layer_fwd
    return table


def _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                   mask_type=None):
    """The fused encoder layer that `nn.TransformerEncoderLayer` calls in inference, as the ops ATen's
    kernel runs (transformer.cpp): linears, attention, LayerNorms and the residual adds. Called
    whole it is one opaque ATen call whose gemms are MKL's (the whole layer 2.2 ms at one thread,
    what eager takes); decomposed, its six linears and two batch matmuls are tidal's. A masked
    layer is left whole (NotImplemented: the op is traced as it is)."""
    if mask is not None or src.dim() != 3:
        return NotImplemented
    functional = torch.nn.functional

    def norm(x, weight, bias):
        return functional.layer_norm(x, (embed_dim,), weight, bias, eps)

    def attention(x):
        batch, length = x.shape[0], x.shape[1]
        head = embed_dim // num_heads
        qkv = functional.linear(x, qkv_weight, qkv_bias).view(batch, length, 3, num_heads, head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = (q * head**-0.5) @ k.transpose(-2, -1)  # ATen scales q before q·kᵀ
        heads = torch.softmax(scores, dim=-1) @ v
        return functional.linear(heads.transpose(1, 2).reshape(batch, length, embed_dim), proj_weight, proj_bias)

    def feed_forward(x):
        hidden = functional.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = functional.gelu(hidden) if use_gelu else torch.relu(hidden)
        return functional.linear(hidden, ffn_weight_2, ffn_bias_2)

    x = attention(norm(src, norm_weight_1, norm_bias_1) if norm_first else src) + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    out = feed_forward(norm(x, norm_weight_2, norm_bias_2) if norm_first else x) + x
    return out if norm_first else norm(out, norm_weight_2, norm_bias_2)


def _moments(x, dims: list[int], eps: float):
    """(x - mean, mean, rstd) over `dims` in the computation dtype, two passes (the mean, then
    the mean of the squared deviations), as ATen's CPU LayerNorm/GroupNorm kernels accumulate in
    float. PyTorch's decompositions go through `var_mean`, which torch-mlir lowers in float64 (to
    match `torch.var`'s double accumulator): a conversion and two f64 reductions per row."""
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xc = x.contiguous().to(compute)
    mean = xc.mean(dims, keepdim=True)
    centered = xc - mean
    return centered, mean, torch.rsqrt((centered * centered).mean(dims, keepdim=True) + eps)


def _native_layer_norm(x, normalized_shape, weight, bias, eps: float):
    centered, mean, rstd = _moments(x, list(range(x.dim() - len(normalized_shape), x.dim())), eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(x.dtype), mean.to(x.dtype), rstd.to(x.dtype)


def _native_group_norm(x, weight, bias, n, c, hw, groups: int, eps: float):
    centered, mean, rstd = _moments(x.reshape(n, groups, -1), [2], eps)
    out = (centered * rstd).reshape(x.shape)
    per_channel = [1, c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out.to(x.dtype), mean.reshape(n, groups).to(x.dtype), rstd.reshape(n, groups).to(x.dtype)


def _squeeze_dims(x, dims):
    """`squeeze.dims` as a `view` (torch-mlir has no squeeze.dims; PyTorch's decomposition emits
    prims.squeeze, which functionalization refuses when a HOP body is traced again, as the adjoint
    bodies of tidal's autodiff rules are)."""
    dims = {d % max(x.dim(), 1) for d in ([dims] if isinstance(dims, int) else dims)}
    return torch.ops.aten.view.default(x, [n for i, n in enumerate(x.shape) if not (i in dims and n == 1)])


def rewrite_contiguous_as_strided(gm: torch.fx.GraphModule) -> None:
    """`as_strided` that only reshapes a contiguous tensor becomes `view` (torch-mlir imports no
    as_strided). Decompositions produce them: `native_group_norm` does inside loop bodies."""
    rewrite_nodes(gm, _contiguous_as_strided_to_view)


def _contiguous_as_strided_to_view(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    from math import prod

    from tidal.runtime.memref import contiguous_strides

    aten = torch.ops.aten
    if node.target is not aten.as_strided.default:
        return False
    x, size, stride = node.args[:3]
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    static = all(isinstance(v, int) for v in (*size, *stride))
    if not (
        isinstance(val, torch.Tensor)
        and static
        and offset in (None, 0)
        and val.is_contiguous()
        and isinstance(val.numel(), int)
        and list(stride) == contiguous_strides(size)
        and prod(size) == val.numel()
    ):
        return False
    node.target = aten.view.default
    node.args, node.kwargs = (x, list(size)), {}
    return True


def export_program(model, example_inputs: tuple, example_kwargs: dict | None = None, dynamic_shapes=None):
    """torch.export `model` (an nn.Module or a callable) with the control-flow HOPs kept.

    The result is decomposed with torch-mlir's table, so it holds the aten ops torch-mlir lowers.
    """
    if not isinstance(model, torch.nn.Module):
        model = _CallableModule(model)
        if isinstance(dynamic_shapes, (tuple, list)):
            dynamic_shapes = (tuple(dynamic_shapes),)  # the wrapper's forward takes *args
    # Dynamo traces the HOP bodies during export; its automatic-dynamic state, keyed by code object
    # and shared with every earlier export in the process (torch's own HOP wrappers are the same
    # code for every program), would make sizes symbolic here only because another program ran
    # first. Its fake-tensor runs of a HOP whose inputs require grad (a module's parameters) go
    # through the HOP's autograd rule: tidal's, installed before the first trace for tidal by
    # tidal.autodiff once a driver has loaded it (`tidal.tracing.before_tidal_traces`; PyTorch's
    # scan rule fails on conv/norm bodies with symbolic sizes: "s9**2 is not tracked with proxy").
    # The importer knows no autodiff.
    with keep_associative_scan(), record_full_user_stacks(), torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        ep = torch.export.export(
            model, tuple(example_inputs), example_kwargs or {}, dynamic_shapes=dynamic_shapes, strict=False
        )
    ep = ep.run_decompositions(decomposition_table())
    rewrite_contiguous_as_strided(ep.graph_module)
    compute_reduced_precision_in_float32(ep.graph_module)
    return ep
