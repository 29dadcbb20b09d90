"""The program corpus (test/corpus/*.py): every program imports into tidal IR and lowers to linalg.

Each corpus file defines `model` and `example_inputs` (see test/corpus/rnn_scan.py). Programs are
imported once per session (`_imported`) and shared by the tests below; nothing here runs the
programs eagerly (torch's eager HOP implementations keep Dynamo state across calls).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tidal.compiler
import tidal.importer
from tidal.tools.tidal_compile import load_program_file

CORPUS = Path(__file__).parents[1] / "corpus"
FILES = sorted(p.name for p in CORPUS.glob("*.py"))
CONTROL_FLOW_OPS = ["tidal.cond", "tidal.while", "tidal.scan", "tidal.associative_scan", "tidal.map"]
TIDAL_OP = re.compile(r'"(tidal\.[a-z_]+)"')


@functools.lru_cache(maxsize=None)
def _imported(name: str):
    """(ImportedProgram, its torch-level IR text) for corpus program `name`, imported once per session.

    The text is taken before any lowering: test_corpus_imports_and_lowers lowers the module in place.
    """
    model, inputs = load_program_file(str(CORPUS / name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = tidal.importer.import_program(model, inputs)
    return prog, str(prog.module)


def _ops(text: str) -> set[str]:
    """The control-flow ops in `text` (tidal.aten_call is formed during lowering)."""
    return set(TIDAL_OP.findall(text)) & set(CONTROL_FLOW_OPS)


@pytest.mark.parametrize("name", FILES)
def test_corpus_imports_and_lowers(name):
    prog, torch_ir = _imported(name)
    ops = _ops(torch_ir)
    assert ops, f"{name}: no tidal op in the imported IR:\n{torch_ir}"
    tidal.compiler.lower(prog.module, prog.context, "linalg")
    linalg_ir = str(prog.module)
    assert "!torch." not in linalg_ir, f"{name}: torch types left after lowering:\n{linalg_ir}"
    assert not re.search(r"(?<![\w.])torch\.", linalg_ir), f"{name}: torch ops left after lowering:\n{linalg_ir}"
    assert _ops(linalg_ir) == ops, f"{name}: tidal ops changed by lowering: {sorted(ops)} -> {sorted(_ops(linalg_ir))}"


def test_corpus_size_and_op_coverage():
    assert len(FILES) >= 30, f"corpus has only {len(FILES)} programs"
    seen: set[str] = set()
    for name in FILES:
        seen |= _ops(_imported(name)[1])
    missing = [op for op in CONTROL_FLOW_OPS if op not in seen]
    assert not missing, f"no corpus program imports to {missing}"


@pytest.mark.parametrize(
    "name,op",
    [
        ("rnn_scan.py", "tidal.scan"),
        ("s5_linear_recurrence.py", "tidal.associative_scan"),
        ("nested_three_levels.py", "tidal.cond"),
    ],
)
def test_tidal_compile_cli(name, op):
    proc = subprocess.run(
        [sys.executable, "-m", "tidal.tools.tidal_compile", str(CORPUS / name), "--emit", "torch"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert f'"{op}"' in proc.stdout, proc.stdout
