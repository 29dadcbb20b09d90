"""tidal-opt as a user meets it: exit codes, located diagnostics, no tracebacks."""

import re
import subprocess
import sys

import pytest

DIAG = re.compile(r"^(\S+):(\d+):(\d+): error: .+", re.M)

VALID = """func.func @f(%xs: tensor<5x2xf32>) -> tensor<5x2xf32> {
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    "tidal.yield"(%x) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}
"""


def tidal_opt(*args, stdin: bytes | None = None):
    return subprocess.run(
        [sys.executable, "-m", "tidal.tools.tidal_opt", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def assert_located_failure(proc, file_name):
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    m = DIAG.search(err)
    assert m and m.group(1) == file_name, err


@pytest.mark.parametrize(
    "name,content",
    [
        ("empty.mlir", b""),
        ("blank.mlir", b"\n\n   \n"),
        ("truncated.mlir", VALID[: len(VALID) // 2].encode()),
        ("garbage.mlir", bytes(range(256)) * 8),
        ("unknown-op.mlir", b'func.func @f() {\n  "tidal.loop"() : () -> ()\n  return\n}\n'),
        ("no-module.mlir", b"%x = 1\n"),
    ],
)
def test_bad_input_gets_located_diagnostic(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    proc = tidal_opt(str(path))
    assert_located_failure(proc, str(path))


def test_stdin_is_named_stdin():
    proc = tidal_opt(stdin=b"func.func @f( {\n")
    assert_located_failure(proc, "<stdin>")


def test_missing_file():
    proc = tidal_opt("/nonexistent/x.mlir")
    assert_located_failure(proc, "/nonexistent/x.mlir")


def test_split_input_file_keeps_original_line_numbers(tmp_path):
    path = tmp_path / "split.mlir"
    broken = VALID.replace("num_xs = 1", "num_xs = 2")
    path.write_text(VALID + "// -----\n" + broken)
    proc = tidal_opt(str(path), "--split-input-file")
    assert_located_failure(proc, str(path))
    line = int(DIAG.search(proc.stderr.decode()).group(2))
    assert line == VALID.count("\n") + 2 + 1  # the map op of the second chunk
    # The valid chunk is still printed.
    assert b'"tidal.map"' in proc.stdout


def test_output_file_and_roundtrip(tmp_path):
    src = tmp_path / "in.mlir"
    out = tmp_path / "out.mlir"
    src.write_text(VALID)
    proc = tidal_opt(str(src), "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    again = tidal_opt(str(out))
    assert again.returncode == 0
    assert again.stdout.decode() == out.read_text()


def test_huge_input_is_handled(tmp_path):
    funcs = [VALID.replace("@f", f"@f{i}") for i in range(2000)]
    path = tmp_path / "huge.mlir"
    path.write_text("".join(funcs))
    proc = tidal_opt(str(path), "--pass-pipeline=builtin.module(tidal-verify)")
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout.count(b'"tidal.map"') == 2000
