"""tidal-opt: the mlir-opt-style driver over tidal's passes and every pass of the bundled MLIR.

Every failure is reported as `FILE:LINE:COL: error: message` on stderr with exit code 1; a Python
traceback reaching the user is a bug.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass

from tidal.diagnostics import Diagnostic, SourceLoc, TidalError, diagnostics_from_exception
from tidal.tools import write_output

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)
EXPECTED = re.compile(
    r"//\s*expected-(error|warning|note|remark)\s*(?:@([+-]?\d+|above|below))?\s*\{\{(.*?)\}\}"
)


@dataclass
class Chunk:
    text: str
    first_line: int


def split_input(text: str, split: bool) -> list[Chunk]:
    if not split:
        return [Chunk(text, 1)]
    chunks, start, line = [], 0, 1
    for m in SPLIT_MARKER.finditer(text):
        chunks.append(Chunk(text[start : m.start()], line))
        line += text[start : m.end()].count("\n") + 1
        start = m.end() + 1
    chunks.append(Chunk(text[start:], line))
    return chunks


@dataclass
class Expected:
    severity: str
    line: int
    message: str
    comment_loc: SourceLoc
    seen: bool = False


def expected_diagnostics(chunk: Chunk, source_name: str) -> list[Expected]:
    out = []
    for i, line in enumerate(chunk.text.split("\n")):
        lineno = chunk.first_line + i
        for m in EXPECTED.finditer(line):
            sev, offset, msg = m.groups()
            if offset in (None, ""):
                target = lineno
            elif offset == "above":
                target = lineno - 1
            elif offset == "below":
                target = lineno + 1
            elif offset[0] in "+-":
                target = lineno + int(offset)
            else:
                target = int(offset)
            out.append(Expected(sev, target, msg, SourceLoc(source_name, lineno, m.start() + 1)))
    return out


def check_expected(diags: list[Diagnostic], expected: list[Expected]) -> list[Diagnostic]:
    """Mismatches between produced and expected diagnostics, as errors to report."""
    problems = []
    for d in diags:
        match = next(
            (
                e
                for e in expected
                if not e.seen
                and e.severity == d.severity
                and d.loc is not None
                and e.line == d.loc.line
                and e.message in d.message
            ),
            None,
        )
        if match:
            match.seen = True
        else:
            problems.append(Diagnostic("error", f"unexpected {d.severity}: {d.message}", d.loc))
    for e in expected:
        if not e.seen:
            problems.append(
                Diagnostic("error", f'expected {e.severity} "{e.message}" was not produced', e.comment_loc)
            )
    return problems


def bundled_mlir_passes() -> list[str]:
    """Pass names from the bundled torch-mlir-opt's --help (the Python API cannot list them)."""
    import os

    import torch_mlir

    exe = os.path.join(os.path.dirname(torch_mlir._mlir_libs.__file__), "torch-mlir-opt")
    try:
        out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return re.findall(r"^      --([a-z0-9-]+)\s+-\s+(.*)$", out, re.M)


def list_passes() -> str:
    import tidal.init_all  # noqa: F401  (registers every pass, pipeline and op rule)
    from tidal.passes import all_passes, all_pipelines

    lines = ["tidal passes:"]
    lines += [f"  {p.name:36s} {p.summary}" for p in all_passes()]
    lines += ["", "tidal pipelines:"]
    lines += [f"  {p.name:36s} {p.summary}" for p in all_pipelines()]
    lines += ["", "bundled MLIR / torch-mlir passes (every registered MLIR pass may be named):"]
    lines += [f"  {name:36s} {summary}" for name, summary in bundled_mlir_passes()]
    return "\n".join(lines)


def describe_op(name: str) -> int:
    import tidal.init_all  # noqa: F401  (registers every pass, pipeline and op rule)
    from tidal.dialects import op_entry, op_names

    entry = op_entry(name)
    if entry is None:
        print(f"tidal-opt: error: unknown op '{name}' (tidal ops: {', '.join(op_names())})", file=sys.stderr)
        return 1
    print(entry.describe())
    return 0


DIALECT_DOC = "docs/dialect.md"
DESCRIBE_DIALECT_COMMAND = f"tidal-opt --describe-dialect -o {DIALECT_DOC}"


def describe_dialect() -> str:
    """The tidal dialect's op reference, docs/dialect.md: every registered op's `--describe-op` text.

    Regenerate the page from the repository root with `tidal-opt --describe-dialect -o
    docs/dialect.md` (test/python/test_docs.py fails while the committed page differs). The text
    is deterministic, so the comparison means something: ops and transformations sorted by name,
    paths relative to the project root (`dialects/scan.py`), and locations without line numbers
    (`tidal.dialects.scan.verify_scan (dialects/scan.py)`): the qualified name already pins the
    function, and line numbers would make the page stale on every edit above a rule in its file.
    It still goes stale when a rule, an op's documentation or a file's path changes (a moved
    module, a renamed function); that is what regenerating is for.
    """
    import tidal.init_all  # noqa: F401  (registers every pass, pipeline and op rule)
    from tidal.dialects import YIELD, all_ops, all_transformations
    from tidal.dialects.registry import Rule
    from tidal.dialects.verifier import _verify_yield

    ops = sorted(all_ops(), key=lambda e: e.name)
    lines = [
        "# The tidal dialect: op reference",
        "",
        "Generated from the op registry (`dialects/registry.py`); do not edit. Change the op's module",
        "or the rule, then regenerate the page from the repository root:",
        "",
        f"    {DESCRIBE_DIALECT_COMMAND}",
        "",
        "`test/python/test_docs.py` fails while the page is stale (after a rule or a file moves, too).",
        "",
        "Each section is what `tidal-opt --describe-op NAME` prints, with locations given without",
        "line numbers: the op's definition (syntax, operands, attributes, regions, results), the",
        "dialect's verifier and builder, and the rule every transformation attached to it.",
        f"`{YIELD}` terminates every region of these ops; it has no entry of its own (checked by",
        f"`{Rule('verify', _verify_yield).location(line_numbers=False)}` and by each op's verifier).",
        "",
        "Ops:",
        "",
        *(f"- [`{e.name}`](#{e.name.replace('.', '')}): {e.summary}" for e in ops),
        "",
        "Transformations (each attaches per-op rules from its own package):",
        "",
        *(f"- `{t.name}`: {t.summary}" for t in sorted(all_transformations(), key=lambda t: t.name)),
    ]
    for entry in ops:
        lines += ["", f"## {entry.name}", "", "```", entry.describe(line_numbers=False), "```"]
    return "\n".join(lines) + "\n"


def process_chunk(chunk: Chunk, source_name: str, args, ctx) -> tuple[str | None, list[Diagnostic]]:
    """Parse, verify, run the pipeline, print. Returns (output or None, diagnostics)."""
    from torch_mlir import ir

    from tidal.context import parse_module
    from tidal.dialects import verify_module
    from tidal.passes import run_pipeline

    collected: list[Diagnostic] = []

    def handler(d):
        collected.extend(diagnostics_from_exception(_AsMLIRError(d)))
        return True

    handle = ctx.attach_diagnostic_handler(handler)
    try:
        try:
            module = parse_module(chunk.text, source_name, ctx, chunk.first_line)
            errors = verify_module(module.operation)
            if errors:
                return None, collected + [d for e in errors for d in diagnostics_from_exception(e)]
            if args.pass_pipeline:
                run_pipeline(
                    module.operation,
                    args.pass_pipeline,
                    ctx,
                    print_after_all=args.mlir_print_ir_after_all,
                )
        except Exception as exc:  # noqa: BLE001 - every failure becomes a diagnostic
            diags = diagnostics_from_exception(exc)
            if not isinstance(exc, (ir.MLIRError, TidalError)):
                diags = [
                    Diagnostic(
                        "error",
                        f"internal error in tidal-opt ({type(exc).__name__}: {exc}); please report it",
                        SourceLoc(source_name, chunk.first_line, 1),
                    )
                ]
            return None, collected + diags
        printed = module.operation.get_asm(
            print_generic_op_form=args.mlir_print_op_generic,
            enable_debug_info=args.mlir_print_debuginfo,
        )
        return printed, collected
    finally:
        handle.detach()


class _AsMLIRError:
    """Adapter so a lone diagnostic goes through the same flattening as an MLIRError."""

    def __init__(self, d):
        self.error_diagnostics = [d]


MAX_NESTING = 10_000  # brackets; deeper input takes minutes to verify (measured: 20k brackets ~75 s)


def input_problem(text: str, raw: bytes, source_name: str) -> str | None:
    """Reject, with a located message, input MLIR's parser would crash on rather than diagnose."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        return f"{source_name}:{line}:{col}: error: input is not valid UTF-8 (byte 0x{raw[e.start]:02x})"
    depth, line, col = 0, 1, 0
    in_string = False
    for ch in text:
        col += 1
        if ch == "\n":
            line, col, in_string = line + 1, 0, False
        elif ch == '"':
            in_string = not in_string
        elif not in_string and ch in "([{":
            depth += 1
            if depth > MAX_NESTING:
                return (
                    f"{source_name}:{line}:{col}: error: input nests regions/attributes deeper than "
                    f"{MAX_NESTING} levels, which tidal-opt does not support"
                )
        elif not in_string and ch in ")]}":
            depth = max(0, depth - 1)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="tidal-opt",
        description="Run tidal and MLIR passes over an MLIR file (mlir-opt conventions).",
    )
    p.add_argument("input", nargs="?", default="-", help="input file ('-' or nothing: stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: stdout)")
    p.add_argument("--pass-pipeline", default="", help="e.g. 'builtin.module(tidal-verify,cse)'")
    p.add_argument("--split-input-file", action="store_true", help="process '// -----' chunks separately")
    p.add_argument("--verify-diagnostics", action="store_true", help="check expected-error comments")
    p.add_argument("--mlir-print-ir-after-all", action="store_true", help="print IR after each pass (stderr)")
    p.add_argument("--mlir-print-op-generic", action="store_true", help="print ops in generic form")
    p.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    p.add_argument("--list-passes", action="store_true", help="list tidal passes, pipelines and MLIR passes")
    p.add_argument(
        "--describe-op",
        metavar="NAME",
        help="print a tidal op's definition and the rule each transformation registered for it",
    )
    p.add_argument(
        "--describe-dialect",
        action="store_true",
        help=f"print every tidal op's --describe-op text as markdown (`{DESCRIBE_DIALECT_COMMAND}`)",
    )
    args = p.parse_args(argv)

    if args.list_passes:
        print(list_passes())
        return 0
    if args.describe_dialect:
        write_output(describe_dialect(), args.output)
        return 0
    if args.describe_op:
        return describe_op(args.describe_op)

    source_name = "<stdin>" if args.input == "-" else args.input
    try:
        raw = sys.stdin.buffer.read() if args.input == "-" else open(args.input, "rb").read()
    except OSError as e:
        print(f"{source_name}:1:1: error: cannot read input: {e.strerror}", file=sys.stderr)
        return 1
    text = raw.decode("utf-8", errors="surrogateescape")
    problem = input_problem(text, raw, source_name)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    if not text.strip() or all(
        not ln.strip() or ln.lstrip().startswith("//") for ln in text.splitlines()
    ):
        print(f"{source_name}:1:1: error: input is empty: expected an MLIR module", file=sys.stderr)
        return 1

    import tidal.init_all  # noqa: F401  (registers every pass, pipeline and op rule)
    from tidal.context import make_context

    ctx = make_context()
    outputs, failed = [], False
    for chunk in split_input(text, args.split_input_file):
        with ctx:
            out, diags = process_chunk(chunk, source_name, args, ctx)
        if args.verify_diagnostics:
            problems = check_expected(diags, expected_diagnostics(chunk, source_name))
            for d in problems:
                print(d.format(), file=sys.stderr)
            failed |= bool(problems)
        else:
            for d in diags:
                if d.loc is None:  # e.g. pass scheduling errors: point at the input, not nowhere
                    d = Diagnostic(d.severity, d.message, SourceLoc(source_name, chunk.first_line, 1))
                print(d.format(), file=sys.stderr)
            failed |= out is None or any(d.severity == "error" for d in diags)
        if out is not None:
            outputs.append(out)

    write_output("// -----\n".join(outputs), args.output)
    return 1 if failed else 0


def entry() -> None:
    """Run main() on a thread with a large stack: MLIR's parser and verifier recurse per nesting level."""
    import threading

    result = {"code": 1}

    def run():
        try:
            result["code"] = main()
        except KeyboardInterrupt:
            result["code"] = 130
        except SystemExit as e:  # argparse's --help (0) and usage errors (2), raised on this thread
            result["code"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)

    threading.stack_size(256 * 1024 * 1024)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    sys.exit(result["code"])


if __name__ == "__main__":
    entry()
