"""Smoke test of the benchmark suite: bench/run.py --quick runs, writes results.json and a PNG.

No timing is asserted. Inductor is left out (--backends eager,tidal: its cold compiles take ~20 s
each on a 2-core machine); its cells must still be present, recorded as "skipped".
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = ["rnn_scan", "while_loop"]


def test_bench_quick_runs_and_writes_results(tmp_path):
    pytest.importorskip("matplotlib")
    cmd = [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--cases", ",".join(CASES),
           "--backends", "eager,tidal", "--out", str(tmp_path), "--matmul-precision", "high"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["meta"]["threads"] == 1 and results["meta"]["float32_matmul_precision"] == "high"
    for case in CASES:
        rows = results["cases"][case]["rows"]
        assert rows, case
        for row in rows:
            for backend in ("eager", "inductor", "tidal"):
                rec = row["cells"][backend]
                assert isinstance(rec, dict) and "status" in rec, (case, row["label"], backend, rec)
                if rec["status"] == "ok":
                    assert rec["time_s"] > 0
                    assert rec["float32_matmul_precision"] == "high"  # set in every configuration's process
            assert row["cells"]["inductor"]["status"] == "skipped"
            assert row["cells"]["eager"]["status"] == "ok", row["cells"]["eager"]  # the harness itself works
    assert list(tmp_path.glob("*.png")), "no plot written"


def test_cells_measured_in_several_processes():
    """--processes N: a cell is the record of the process with the median time, every process's
    time kept; a failure in any process stands."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from run import _across_processes, _fmt_cell
    finally:
        sys.path.pop(0)

    recs = [{"status": "ok", "time_s": t, "compile_s": c} for t, c in ((3.0, 0.3), (1.0, 0.1), (2.0, 0.2))]
    cell = _across_processes(recs)
    assert (cell["time_s"], cell["compile_s"], cell["process_times_s"]) == (2.0, 0.2, [1.0, 2.0, 3.0])
    assert _fmt_cell(cell, "time_s", 1e3, "{:.3f}", []) == "2000.000 ±50%"
    assert _across_processes(recs[:2])["time_s"] == 1.0  # the lower middle of an even count
    failed = {"status": "failed", "error_type": "RuntimeError", "error": "boom"}
    assert _across_processes([recs[0], failed, recs[2]]) is failed


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru", "ln_lstm", "mingru", "residual_rnn"])
def test_recurrence_cells_agree(kind):
    """The recurrences case's programs compute one thing: the scan step and the Python loop, and
    torch.nn's module (cuDNN/oneDNN) given the same weights, for the standard cells."""
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from cases import STANDARD_MODULES, make_cell, recurrence_xs
    finally:
        sys.path.pop(0)

    xs = recurrence_xs(dict(T=5, B=3, H=8), "cpu")
    with torch.no_grad():
        ref = make_cell(kind, 8, "cpu", "loop")(xs)
        assert ref.shape == (5, 3, 8)
        torch.testing.assert_close(make_cell(kind, 8, "cpu", "scan")(xs), ref)
        if kind in STANDARD_MODULES:
            torch.testing.assert_close(make_cell(kind, 8, "cpu", "module")(xs), ref)
