"""Generated documentation is current: docs/dialect.md is what `tidal-opt --describe-dialect` prints.

The page is the tidal dialect's op reference, built from the op registry (every op's
`--describe-op` text, locations without line numbers; see `tidal_opt.describe_dialect`). It goes
stale when an op's documentation, a rule or a file's path changes; the failure shows a short diff
and the command that regenerates it.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tidal.tools.tidal_opt import DESCRIBE_DIALECT_COMMAND, DIALECT_DOC, describe_dialect

ROOT = Path(__file__).resolve().parents[2]
MAX_DIFF_LINES = 40


def _tidal_from_this_checkout() -> bool:
    """The page names paths in this tree; a tidal installed from elsewhere prints other paths."""
    import tidal.dialects

    return Path(tidal.dialects.__file__).resolve().is_relative_to(ROOT)


def stale_report(committed: str, generated: str) -> str:
    diff = list(
        difflib.unified_diff(
            committed.splitlines(),
            generated.splitlines(),
            f"{DIALECT_DOC} (committed)",
            f"{DIALECT_DOC} (generated)",
            lineterm="",
            n=1,
        )
    )
    if len(diff) > MAX_DIFF_LINES:
        diff = diff[:MAX_DIFF_LINES] + [f"... ({len(diff) - MAX_DIFF_LINES} more diff lines)"]
    return (
        f"{DIALECT_DOC} is stale (it differs from what the op registry generates); "
        f"regenerate it from the repository root with\n\n    {DESCRIBE_DIALECT_COMMAND}\n\n"
        "and commit it. Difference:\n" + "\n".join(diff)
    )


def test_dialect_doc_is_current():
    if not _tidal_from_this_checkout():
        pytest.skip("tidal is not imported from this checkout (not an editable install)")
    path = ROOT / DIALECT_DOC
    committed = path.read_text(encoding="utf-8") if path.exists() else ""
    generated = describe_dialect()
    if committed != generated:
        pytest.fail(stale_report(committed, generated), pytrace=False)


def test_stale_report_shows_diff_and_command():
    generated = describe_dialect()
    edited = generated.replace("## tidal.scan", "## tidal.scan (edited by hand)")
    report = stale_report(edited, generated)
    assert DESCRIBE_DIALECT_COMMAND in report
    assert "-## tidal.scan (edited by hand)" in report and "+## tidal.scan" in report


def test_dialect_doc_is_every_ops_describe_op_text():
    """Each op's section is its --describe-op text, line numbers left out; nothing machine-specific."""
    from tidal.dialects import all_ops

    text = describe_dialect()
    assert text == describe_dialect()
    sections = re.findall(r"^## (\S+)$", text, re.M)
    assert sections == sorted(e.name for e in all_ops()) and "tidal.aten_call" in sections
    for entry in all_ops():
        without_lines = entry.describe(line_numbers=False)
        assert re.sub(r"(\.py):\d+\)", r"\1)", entry.describe()) == without_lines
        assert f"## {entry.name}\n\n```\n{without_lines}\n```\n" in text
    assert str(ROOT) not in text and not re.search(r"\.py:\d+", text)
    assert DESCRIBE_DIALECT_COMMAND in text and "do not edit" in text


def test_describe_dialect_command_writes_the_page(tmp_path):
    out = tmp_path / "dialect.md"
    proc = subprocess.run(
        [sys.executable, "-m", "tidal.tools.tidal_opt", "--describe-dialect", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == describe_dialect()
