"""Native symbols that compiled code calls in torch's own library (BLAS today).

Backends declare the names their passes emit calls to (`require`); the runtime resolves them in
libtorch_cpu, which every process running tidal has loaded, and registers the addresses with each
JIT engine. The disk cache links its shared libraries against the same library.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os

_REQUIRED: set[str] = set()


def torch_cpu_library() -> str:
    torch_dir = os.path.dirname(importlib.util.find_spec("torch").origin)
    return os.path.join(torch_dir, "lib", "libtorch_cpu.so")


def torch_link_flags() -> list[str]:
    """`cc` flags linking a shared library against libtorch_cpu (and finding it at run time)."""
    lib_dir = os.path.dirname(torch_cpu_library())
    return [f"-L{lib_dir}", "-ltorch_cpu", f"-Wl,-rpath,{lib_dir}"]


def require(*names: str) -> None:
    """Declare symbols of libtorch_cpu that compiled code may call."""
    _REQUIRED.update(names)


@functools.lru_cache(maxsize=1)
def _torch_cpu_handle() -> ctypes.CDLL:
    """Looked up with ctypes (RTLD_LOCAL: the handle torch already holds) rather than handed to the
    ExecutionEngine as a shared library: its dlopen promotes libtorch_cpu to global scope, after
    which eager PyTorch ran 80x slower with 2 threads (measured: RNN step loop 15 ms → 1.29 s).
    """
    import torch  # noqa: F401  (loads libtorch_cpu first, so ctypes gets the same handle)

    return ctypes.CDLL(torch_cpu_library())


@functools.lru_cache(maxsize=None)
def _address(name: str) -> int | None:
    """None where this torch's library lacks the symbol (torch 2.11, the GPU machine's, has no
    `torch_exception_get_what_without_backtrace`): programs that do not call it still compile."""
    fn = getattr(_torch_cpu_handle(), name, None)
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value


def addresses() -> dict[str, int]:
    """Address of every required symbol this torch has, by name. Code that calls one it lacks
    fails to link when it is compiled (an error tidal reports), not when it runs."""
    found = {name: _address(name) for name in sorted(_REQUIRED)}
    return {name: address for name, address in found.items() if address}
