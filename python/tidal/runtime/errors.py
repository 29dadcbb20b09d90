"""Errors raised inside native code (a failing ATen call) reach Python after the call returns.

Compiled modules that call ATen define `tidal_set_error_hook(fn)`; the runtime installs one hook
per loaded module. A failing call hands the hook its operator's name; the hook keeps the first
failure of the current thread with ATen's message, and `raise_pending()` raises it as a
RuntimeError once the native function has returned (native frames cannot be unwound from Python).
"""

from __future__ import annotations

import ctypes
import threading

import torch

from tidal.runtime import externs

ERROR_HOOK_SETTER = "tidal_set_error_hook"
externs.require("torch_exception_get_what_without_backtrace")

_pending = threading.local()
# Failures recorded and not yet raised, in any thread: the check after every native call reads
# this one global (a thread-local lookup costs ten times as much, on calls of a few µs).
_unraised = 0
_HOOK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


def _what() -> str:
    address = externs.addresses().get("torch_exception_get_what_without_backtrace")
    if address is None:
        return "ATen's message is not available from this version of torch"
    text = ctypes.CFUNCTYPE(ctypes.c_char_p)(address)()
    return text.decode(errors="replace") if text else "unknown error"


@_HOOK_TYPE
def _on_error(callee: bytes) -> None:
    global _unraised
    if getattr(_pending, "error", None) is None:
        _pending.error = (callee.decode(errors="replace"), _what())
        _unraised += 1


def install(packed_setter: int | None) -> None:
    """Point a loaded module's error hook at this runtime (no-op for modules without one).

    `packed_setter` is the setter's packed wrapper (`_mlir_tidal_set_error_hook(void** args)`),
    which both the JIT (`raw_lookup`) and a cached shared library expose.
    """
    if packed_setter:
        hook = ctypes.c_void_p(ctypes.cast(_on_error, ctypes.c_void_p).value)
        args = (ctypes.c_void_p * 1)(ctypes.addressof(hook))
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(packed_setter)(ctypes.addressof(args))


def raise_pending() -> None:
    global _unraised
    if not _unraised:
        return
    error = getattr(_pending, "error", None)
    if error is not None:
        _pending.error = None
        _unraised -= 1
        callee, message = error
        raise _python_error(callee, message)(f"{callee} failed in compiled code: {message}")


# ATen reports an index out of range with TORCH_CHECK_INDEX (a c10::IndexError, Python's
# IndexError) in these operators; the C shim passes on the message only, so the kind is told here.
_INDEX_ERRORS = {"aten::index", "aten::index_select", "aten::embedding", "aten::index_put", "aten::index_put_"}


def _python_error(callee: str, message: str) -> type[Exception]:
    if callee in _INDEX_ERRORS and ("out of range" in message or "out of bounds" in message):
        return IndexError
    if callee == "aten::_linalg_check_errors":  # eager raises torch.linalg.LinAlgError (a RuntimeError)
        return torch.linalg.LinAlgError
    return RuntimeError
