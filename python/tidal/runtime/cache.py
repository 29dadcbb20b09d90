"""Compiled-artifact cache, in memory and on disk, keyed by the hash of the linalg-level IR.

On disk each entry is a shared library (the JIT's object code linked with `cc -shared` against
libtorch_cpu for the BLAS symbols) plus a JSON signature, so a second process loads native code
with ctypes and runs no MLIR or LLVM compilation at all. Without a C compiler the disk cache is
skipped (with a one-time warning) and the in-memory JIT still works.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch

from tidal.runtime import externs
from tidal.runtime.executable import NativeFunction
from tidal.runtime.memref import TensorSig

CACHE_FORMAT = 1
MEMORY_ENTRIES = 64


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    disk_writes: int = 0


stats = CacheStats()
_memory: OrderedDict[str, NativeFunction] = OrderedDict()
_lock = threading.Lock()
_warned_no_cc = False


def cache_dir() -> str | None:
    """`$TIDAL_CACHE_DIR`, else ~/.cache/tidal; `TIDAL_CACHE_DIR=off` disables the disk cache."""
    d = os.environ.get("TIDAL_CACHE_DIR")
    if d == "off":
        return None
    return d or os.path.join(os.path.expanduser("~"), ".cache", "tidal")


def cache_key(linalg_ir: str, func_name: str, pipeline: str, codegen: str) -> str:
    """`codegen`: the identity of the code generator that turns the IR into machine code (the
    backend's `codegen_fingerprint()`: a hash of its sources and any choice that changes the code
    but not the IR). The runtime knows no code generator; its caller names it."""
    from tidal import __version__

    h = hashlib.sha256()
    for part in (str(CACHE_FORMAT), __version__, torch.__version__, codegen, pipeline, func_name, linalg_ir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def memory_entries() -> int:
    return len(_memory)


def lookup(key: str, func_name: str) -> NativeFunction | None:
    with _lock:
        native = _memory.get(key)
        if native is not None:
            _memory.move_to_end(key)
            stats.memory_hits += 1
            return native
    d = cache_dir()
    if d is None:
        return None
    so, meta = os.path.join(d, f"{key}.so"), os.path.join(d, f"{key}.json")
    if not (os.path.exists(so) and os.path.exists(meta)):
        return None
    try:
        with open(meta) as f:
            info = json.load(f)
        args = [_sig_from_json(s) for s in info["args"]]
        results = [_sig_from_json(s) for s in info["results"]]
        native = NativeFunction.from_shared_library(so, func_name, args, results)
    except (OSError, ValueError, KeyError, AttributeError):
        return None  # a stale or partial entry: recompile
    stats.disk_hits += 1
    remember(key, native)
    return native


def remember(key: str, native: NativeFunction) -> None:
    with _lock:
        _memory[key] = native
        _memory.move_to_end(key)
        while len(_memory) > MEMORY_ENTRIES:
            _memory.popitem(last=False)


def store(key: str, native: NativeFunction, args: list[TensorSig], results: list[TensorSig]) -> None:
    """Write the JIT'd code of `native` as a shared library entry (best effort)."""
    global _warned_no_cc
    d = cache_dir()
    engine = native.keepalive
    if d is None or not hasattr(engine, "dump_to_object_file"):
        return
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        if not _warned_no_cc:
            warnings.warn("tidal: no C compiler found; compiled code is not cached on disk", stacklevel=2)
            _warned_no_cc = True
        return
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        obj, so = os.path.join(tmp, "code.o"), os.path.join(tmp, "code.so")
        engine.dump_to_object_file(obj)
        # The JIT emits non-PIC (large code model) code: allow text relocations explicitly.
        cmd = [cc, "-shared", "-o", so, obj, *externs.torch_link_flags(), "-lm", "-Wl,-z,notext"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return
        meta = os.path.join(tmp, "meta.json")
        with open(meta, "w") as f:
            json.dump({"args": [_sig_to_json(s) for s in args], "results": [_sig_to_json(s) for s in results]}, f)
        os.replace(so, os.path.join(d, f"{key}.so"))
        os.replace(meta, os.path.join(d, f"{key}.json"))
    stats.disk_writes += 1


def _sig_to_json(s: TensorSig) -> dict:
    return {"dtype": str(s.dtype).removeprefix("torch."), "shape": list(s.shape)}


def _sig_from_json(d: dict) -> TensorSig:
    return TensorSig(getattr(torch, d["dtype"]), tuple(d["shape"]))
