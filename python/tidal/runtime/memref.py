"""Zero-copy marshalling between torch tensors and MLIR memref descriptors.

Inputs: a descriptor over the tensor's own storage (made contiguous first if it is not: the
compiled function's arguments have the identity layout). Outputs: memory the compiled code
malloc'ed is adopted by a torch tensor and freed with it; anything else (an input's storage, a
global constant, a buffer already adopted by another result) is copied.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

import numpy as np
import torch

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

# Element types as they appear in builtin tensor types → torch dtypes.
MLIR_TO_TORCH = {
    "f32": torch.float32,
    "f64": torch.float64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "i1": torch.bool,
}
# numpy views for each torch dtype (bfloat16 travels as uint16 and is reinterpreted).
_NP_VIEW = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.bfloat16: np.uint16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}
# MLIR's marker for memrefs that point at globals (never to be freed).
_GLOBAL_SENTINEL = 0xDEADBEEF


@dataclass(frozen=True)
class TensorSig:
    dtype: torch.dtype
    shape: tuple  # int | None per dim

    @property
    def rank(self) -> int:
        return len(self.shape)


def descriptor_type(rank: int):
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if rank:
        fields += [("shape", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


def results_type(sigs: list[TensorSig]):
    """The C-interface result: one descriptor, or a struct of them for several results."""
    if len(sigs) == 1:
        return descriptor_type(sigs[0].rank)
    fields = [(f"r{i}", descriptor_type(s.rank)) for i, s in enumerate(sigs)]
    return type("Results", (ctypes.Structure,), {"_fields_": fields})


def fill_descriptor(desc, t: torch.Tensor) -> None:
    ptr = t.data_ptr()
    desc.allocated = ptr
    desc.aligned = ptr
    desc.offset = 0
    if t.dim():
        desc.shape[:] = list(t.shape)
        desc.strides[:] = list(t.stride())


def _numpy_view(addr: int, shape: tuple, dtype: torch.dtype):
    np_dtype = np.dtype(_NP_VIEW[dtype])
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if numel == 0:
        return np.empty(shape, dtype=np_dtype)
    buf = (ctypes.c_char * (numel * np_dtype.itemsize)).from_address(addr)
    return np.frombuffer(buf, dtype=np_dtype, count=numel).reshape(shape)


def _as_torch(arr: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def take_result(desc, sig: TensorSig, owned_elsewhere) -> torch.Tensor:
    """A torch tensor for a result descriptor; adopts fresh allocations, copies the rest."""
    rank = sig.rank
    shape = tuple(desc.shape[:rank]) if rank else ()
    itemsize = torch.empty((), dtype=sig.dtype).element_size()
    addr = (desc.aligned or 0) + desc.offset * itemsize
    if rank:
        expected, acc = [], 1
        for size in reversed(shape):
            expected.append(acc)
            acc *= size
        if list(desc.strides[:rank]) != list(reversed(expected)) and acc > 1:
            raise RuntimeError(f"compiled function returned a non-contiguous result {shape}")
    arr = _numpy_view(addr, shape, sig.dtype)
    allocated = desc.allocated or 0
    if allocated == 0 or allocated == _GLOBAL_SENTINEL or owned_elsewhere(allocated):
        return _as_torch(arr.copy(), sig.dtype)
    weakref.finalize(arr, _libc.free, allocated)
    return _as_torch(arr, sig.dtype)
