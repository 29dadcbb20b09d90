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
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
MADV_HUGEPAGE = 14  # Linux
HUGE_PAGE = 2 << 20
MIN_ADVISED = 4 << 20  # smaller buffers would round up to a whole huge page for little gain


def advise_huge_pages(start: int, length: int) -> None:
    """Ask Linux to back [start, start + length) (2 MiB aligned) with 2 MiB pages when first
    touched (transparent huge pages in `always` or `madvise` mode; a no-op otherwise)."""
    _libc.madvise(start, length, MADV_HUGEPAGE)


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

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def is_static(self) -> bool:
        return None not in self.shape


def results_as_arguments(results: list[TensorSig]) -> bool:
    """The calling convention of a compiled entry function: with every result of static shape,
    the caller passes the result buffers after the arguments and the function returns nothing
    (`tidal-results-to-arguments`); otherwise the results come back as descriptors."""
    return bool(results) and all(s.is_static for s in results)


def contiguous_strides(shape) -> list[int]:
    """Row-major strides as torch gives them (a size-0 dim counts as 1)."""
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return strides[::-1]


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


_SMALL_RESULT_BYTES = 1 << 16


def free_all(pointers: list[int]) -> None:
    for p in pointers:
        _libc.free(p)


def take_result(desc, sig: TensorSig, owned_elsewhere, to_free: list[int]) -> torch.Tensor:
    """A torch tensor for a result descriptor; adopts large fresh allocations, copies the rest.

    Small results are copied into a fresh torch tensor and their buffer appended to `to_free`,
    which the caller frees once every result is taken (a program may return one buffer twice);
    large fresh ones are adopted zero-copy and freed when the tensor dies.
    """
    rank = sig.rank
    shape = tuple(desc.shape[:rank]) if rank else ()
    numel = 1
    for size in shape:
        numel *= size
    itemsize = sig.itemsize
    if rank and numel > 1 and list(desc.strides[:rank]) != contiguous_strides(shape):
        raise RuntimeError(f"compiled function returned a non-contiguous result {shape}")
    nbytes = numel * itemsize
    addr = (desc.aligned or 0) + desc.offset * itemsize
    allocated = desc.allocated or 0
    fresh = not (allocated == 0 or allocated == _GLOBAL_SENTINEL or owned_elsewhere(allocated))
    if nbytes <= _SMALL_RESULT_BYTES or not fresh:
        out = torch.empty(shape, dtype=sig.dtype)
        if nbytes:
            ctypes.memmove(out.data_ptr(), addr, nbytes)
        if fresh:
            to_free.append(allocated)
        return out
    buf = (ctypes.c_char * nbytes).from_address(addr)
    arr = np.frombuffer(buf, dtype=_NP_VIEW[sig.dtype], count=numel).reshape(shape)
    weakref.finalize(arr, _libc.free, allocated)
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if sig.dtype == torch.bfloat16 else t
