"""AOT export: control-flow programs as shared libraries called from C, without Python.

The examples of examples/aot are exported with `tidal-compile --emit so`, the C example is built
against each (with CMake, as the README shows) and run with an empty environment; it compares its
outputs with eager PyTorch's (written by example_io.py) and exits 0 only when they all match.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_aten_calls import Writer

import tidal

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples" / "aot"


def _run(cmd, **kw):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def _build_example(library: Path, build: Path) -> Path:
    """The C example built against `library`: with CMake (the README's way), or plain cc."""
    if shutil.which("cmake"):
        _run(["cmake", "-S", EXAMPLES, "-B", build, f"-DTIDAL_LIBRARY={library}"])
        _run(["cmake", "--build", build])
        return build / "run_model"
    build.mkdir(parents=True)
    exe = build / "run_model"
    _run(["cc", f"-DTIDAL_MODEL={library.stem}", f"-I{library.parent}", EXAMPLES / "run_model.c", library,
          f"-Wl,-rpath,{library.parent}", "-lm", "-o", exe])
    return exe


def _needed(library: Path) -> list[str]:
    """The shared libraries `library` names as dependencies (its ELF DT_NEEDED entries)."""
    out = _run(["readelf", "-d", library]).stdout
    return [line.split("[")[1].split("]")[0] for line in out.splitlines() if "(NEEDED)" in line]


@pytest.mark.parametrize(
    "example,outputs,links_torch",
    [("rnn_scan", 2, True), ("newton_while", 2, False), ("clamp_cond", 1, False)],
)
def test_exported_example_matches_eager_from_c(tmp_path, example, outputs, links_torch):
    library = tmp_path / f"{example}.so"
    report = _run([sys.executable, "-m", "tidal.tools.tidal_compile", EXAMPLES / f"{example}.py", "--emit", "so",
                   "-o", library]).stdout
    assert f"wrote {library}" in report and (tmp_path / f"{example}.h").is_file()
    io = tmp_path / "io"
    _run([sys.executable, EXAMPLES / "example_io.py", EXAMPLES / f"{example}.py", io])
    exe = _build_example(library, tmp_path / "build")
    done = subprocess.run([exe, io], capture_output=True, text=True, env={})  # no Python anywhere near
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("matches eager") == outputs, done.stdout
    assert any("libtorch_cpu" in n for n in _needed(library)) == links_torch, _needed(library)


def test_header_documents_every_input_and_output(tmp_path):
    """Names, dtypes, shapes with the dynamic dims named as the user named them, and what it links."""
    _run([sys.executable, "-m", "tidal.tools.tidal_compile", EXAMPLES / "rnn_scan.py", "--emit", "so",
          "-o", tmp_path / "rnn.so"])
    header = (tmp_path / "rnn.h").read_text()
    assert "h0               float32   [4, 16]" in header
    assert "xs               float32   [T, 4, 16]" in header
    assert "output1          float32   [T, 4, 16]" in header
    assert "Dynamic dims: T " in header
    assert "Links: BLAS sgemm_" in header
    for decl in ("int rnn_run(const tidal_tensor *inputs, tidal_tensor *outputs);", "const char *rnn_last_error(void);",
                 "#define RNN_NUM_INPUTS 2"):
        assert decl in header


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.c_int64 * 8)]


def _call(lib, name, inputs: list[torch.Tensor], num_outputs: int):
    """(status, error text, outputs as numpy-backed copies) of NAME_run through the C interface."""
    ins = (Tensor * len(inputs))()
    for slot, t in zip(ins, inputs):
        slot.data = t.data_ptr()
        slot.shape[: t.dim()] = list(t.shape)
    outs = (Tensor * num_outputs)()
    run = getattr(lib, f"{name}_run")
    run.restype = ctypes.c_int
    status = run(ins, outs)
    last_error = getattr(lib, f"{name}_last_error")
    last_error.restype = ctypes.c_char_p
    return status, last_error().decode(), outs


def scatter_rows(buf, rows, values):
    """An index_put in a loop: an ATen call inside the compiled loop (it fails on a bad row)."""
    return Writer()(buf, rows, values)


def test_program_calling_aten_links_libtorch_and_reports_failures(tmp_path):
    buf, values = torch.zeros(5, 3), torch.arange(9.0).reshape(3, 3)
    good, bad = torch.tensor([0, 4, 0]), torch.tensor([0, 9, 0])
    library = tmp_path / "scatter.so"
    tidal.export(scatter_rows, (buf, good, values), str(library))
    assert "libtorch_cpu" in (tmp_path / "scatter.h").read_text()
    assert any("libtorch_cpu" in n for n in _needed(library))
    lib = ctypes.CDLL(str(library))
    status, error, outs = _call(lib, "scatter", [buf, good, values], 2)
    assert (status, error) == (0, "")
    got = torch.frombuffer((ctypes.c_float * 15).from_address(outs[1].data), dtype=torch.float32).reshape(5, 3).clone()
    torch.testing.assert_close(got, scatter_rows(buf, good, values)[1])
    for o in outs:
        ctypes.CDLL(None).free(ctypes.c_void_p(o.data))
    status, error, _ = _call(lib, "scatter", [buf, bad, values], 2)
    assert status == 1 and "aten::index_put" in error and "out of bounds" in error, error


def test_wrong_static_size_is_refused_with_its_reason(tmp_path):
    library = tmp_path / "clamp.so"
    _run([sys.executable, "-m", "tidal.tools.tidal_compile", EXAMPLES / "clamp_cond.py", "--emit", "so", "-o", library])
    status, error, _ = _call(ctypes.CDLL(str(library)), "clamp", [torch.randn(31, 32)], 1)
    assert status == 1 and error == "input 0 (x): dim 0 is 31, expected 32"


def test_emit_so_needs_an_output_file():
    done = subprocess.run([sys.executable, "-m", "tidal.tools.tidal_compile", str(EXAMPLES / "clamp_cond.py"),
                           "--emit", "so"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "error: --emit so writes a library: name it with -o NAME.so" in done.stderr
