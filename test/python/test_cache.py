"""The compiled-artifact cache: a second process loads native code instead of compiling."""

import json
import os
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).parents[1] / "corpus"

SCRIPT = """
import json, warnings, torch
warnings.filterwarnings("ignore")
from tidal.tools.tidal_compile import load_program_file
from tidal.compiler import compile_program
from tidal.runtime import cache
model, inputs = load_program_file({path!r})
with torch.no_grad():
    program = compile_program(model, inputs)
    out = program(*inputs)
    torch.testing.assert_close(out, model(*inputs))
    torch.testing.assert_close(program.native.entry()(*inputs), program.native(*inputs))
print(json.dumps(dict(cache.stats.__dict__, static_entry=program.native.static is not None)))
"""


def run(path, cache_dir):
    env = dict(os.environ, TIDAL_CACHE_DIR=str(cache_dir))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(path=str(path))], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_loads_instead_of_compiling(tmp_path):
    program = CORPUS / "gru_scan.py"
    first = run(program, tmp_path)
    assert first["compiles"] == 1 and first["disk_writes"] == 1 and first["disk_hits"] == 0
    assert len(list(tmp_path.glob("*.so"))) == 1
    second = run(program, tmp_path)
    assert second["compiles"] == 0 and second["disk_hits"] == 1
    assert first["static_entry"] and second["static_entry"]  # the shared library has it too


def test_different_programs_get_different_entries(tmp_path):
    run(CORPUS / "gru_scan.py", tmp_path)
    run(CORPUS / "while_counter.py", tmp_path)
    assert len(list(tmp_path.glob("*.so"))) == 2


def test_corrupt_entry_is_recompiled(tmp_path):
    program = CORPUS / "while_counter.py"
    run(program, tmp_path)
    (entry,) = tmp_path.glob("*.so")
    entry.write_bytes(b"not a shared library")
    again = run(program, tmp_path)
    assert again["compiles"] == 1 and again["disk_hits"] == 0


def test_cache_key_depends_on_the_compilers_code(monkeypatch):
    """An entry compiled by other compiler code (an edited pass in a checkout, same version string)
    is never reused: the key holds the CPU backend's fingerprint, which hashes tidal's backend,
    conversion and runtime sources (the runtime itself knows no code generator)."""
    import tidal.backends.cpu as cpu
    from tidal.runtime import cache

    real = cpu._sources_fingerprint()
    assert len(real) == 64
    key = cache.cache_key("module {}", "main", "pipeline", cpu.codegen_fingerprint())
    monkeypatch.setattr(cpu, "_sources_fingerprint", lambda: "other code")
    assert cache.cache_key("module {}", "main", "pipeline", cpu.codegen_fingerprint()) != key


MANY_TENSORS = """
import json, warnings, torch
warnings.filterwarnings("ignore")
from tidal.compiler import compile_program
from tidal.runtime import cache
xs = [torch.full((2,), float(i)) for i in range(1030)]

def f(*xs):
    return torch.stack(xs).sum(0)

program = compile_program(f, tuple(xs))
torch.testing.assert_close(program(*xs), f(*xs))
print(json.dumps(dict(cache.stats.__dict__, static_entry=program.native.static is not None)))
"""


def test_program_of_more_tensors_than_ctypes_passes_as_arguments(tmp_path):
    """1031 tensors (1030 arguments, one result): more than ctypes' 1024 arguments of a C function.
    The program is called through its packed interface (one pointer argument), compiled and loaded
    from the disk cache alike; it gets no static entry."""
    env = dict(os.environ, TIDAL_CACHE_DIR=str(tmp_path))
    stats = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", MANY_TENSORS], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        stats.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert stats[0]["compiles"] == 1 and stats[1]["disk_hits"] == 1
    assert not stats[0]["static_entry"] and not stats[1]["static_entry"]
