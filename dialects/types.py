"""Shape/dtype views over the two tensor type families tidal ops accept.

tidal ops carry either builtin `tensor<...>` types (after conversion) or torch's
`!torch.vtensor<[...],dtype>` (straight from the importer). Verifiers and lowerings reason about
both through `TensorSpec`, and build derived types (a slice along `dim`, a stack along `dim`) in the
family they started from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch_mlir import ir

DYNAMIC = None  # a dynamic (`?`) dimension

_VTENSOR = re.compile(r"^!torch\.vtensor<\[(.*)\],(.+)>$")


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple  # of int | None (dynamic)
    dtype: str  # element type spelling, e.g. "f32", "i1", "si64"
    torch: bool  # True for !torch.vtensor, False for builtin tensor

    @property
    def rank(self) -> int:
        return len(self.shape)

    def to_type(self, ctx: ir.Context | None = None) -> ir.Type:
        dims = ["?" if d is None else str(d) for d in self.shape]
        if self.torch:
            text = f"!torch.vtensor<[{','.join(dims)}],{self.dtype}>"
        else:
            text = f"tensor<{''.join(d + 'x' for d in dims)}{self.dtype}>"
        return ir.Type.parse(text, ctx) if ctx is not None else ir.Type.parse(text)

    def without_dim(self, dim: int) -> "TensorSpec":
        return TensorSpec(self.shape[:dim] + self.shape[dim + 1 :], self.dtype, self.torch)

    def with_dim(self, dim: int, size) -> "TensorSpec":
        return TensorSpec(self.shape[:dim] + (size,) + self.shape[dim:], self.dtype, self.torch)


def tensor_spec(t: ir.Type) -> TensorSpec | None:
    """The shape and dtype of a ranked builtin tensor or torch vtensor type, else None."""
    if isinstance(t, ir.RankedTensorType):
        rt = t
        shape = tuple(None if rt.is_dynamic_dim(i) else rt.get_dim_size(i) for i in range(rt.rank))
        return TensorSpec(shape, str(rt.element_type), torch=False)
    m = _VTENSOR.match(str(t))
    if m:
        dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
        shape = tuple(None if d == "?" else int(d) for d in dims)
        return TensorSpec(shape, m.group(2), torch=True)
    return None


def is_predicate_type(t: ir.Type) -> bool:
    """0-d boolean tensor: `tensor<i1>` or `!torch.vtensor<[],i1>`."""
    spec = tensor_spec(t)
    return spec is not None and spec.rank == 0 and spec.dtype == "i1"


def dims_compatible(a, b) -> bool:
    return a is None or b is None or a == b
