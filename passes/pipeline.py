"""Build an MLIR PassManager from pipeline text that mixes tidal passes with MLIR passes.

MLIR's textual pipeline parser only knows C++-registered passes, so the text is split here: tidal
passes and pipelines become Python passes (`PassManager.add(callable)`), everything else is handed
to MLIR verbatim. The tidal verifier runs after every element, so a pass that breaks a tidal op is
caught where it happened.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from torch_mlir import ir, passmanager

from tidal.diagnostics import SourceLoc, TidalError
from tidal.dialects import verify_module
from tidal.passes.registry import lookup_pass, lookup_pipeline

PIPELINE_SOURCE = "<pass-pipeline>"


class PipelineError(TidalError):
    pass


@dataclass
class Element:
    name: str
    text: str  # the element as written, e.g. `func.func(cse)` or `canonicalize{max-iterations=3}`
    col: int  # 1-based column in the pipeline text
    options: str = ""  # contents of `{...}`
    nested: list["Element"] = field(default_factory=list)  # contents of `(...)`


def _error(message: str, col: int) -> PipelineError:
    return PipelineError(message, SourceLoc(PIPELINE_SOURCE, 1, col))


def parse_pipeline(text: str) -> list[Element]:
    """Split `builtin.module(a, b{x=1}, func.func(c))` (or `a, b, ...`) into module-level elements."""
    elements, pos = _parse_list(text, 0, top=True)
    if pos != len(text):
        raise _error(f"unexpected '{text[pos]}' in pass pipeline", pos + 1)
    if len(elements) == 1 and elements[0].name == "builtin.module" and elements[0].nested is not None:
        if elements[0].options:
            raise _error("builtin.module takes no options", elements[0].col)
        return elements[0].nested
    for e in elements:
        if e.name == "builtin.module":
            raise _error("builtin.module(...) must be the whole pipeline", e.col)
    return elements


def _parse_list(text: str, pos: int, top: bool) -> tuple[list[Element], int]:
    elements: list[Element] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text) or text[pos] == ")":
            if elements and text[pos - 1 if pos else 0] == ",":
                raise _error("expected a pass name after ','", pos + 1)
            return elements, pos
        start = pos
        while pos < len(text) and (text[pos].isalnum() or text[pos] in "-_."):
            pos += 1
        name = text[start:pos]
        if not name:
            raise _error(f"expected a pass name, got '{text[pos]}'", pos + 1)
        elem = Element(name=name, text="", col=start + 1, nested=None)
        if pos < len(text) and text[pos] == "{":
            depth, opt_start = 0, pos
            while pos < len(text):
                depth += {"{": 1, "}": -1}.get(text[pos], 0)
                pos += 1
                if depth == 0:
                    break
            if depth != 0:
                raise _error(f"unterminated options of '{name}'", opt_start + 1)
            elem.options = text[opt_start + 1 : pos - 1]
        if pos < len(text) and text[pos] == "(":
            nested, pos = _parse_list(text, pos + 1, top=False)
            if pos >= len(text) or text[pos] != ")":
                raise _error(f"missing ')' closing '{name}('", start + 1)
            pos += 1
            elem.nested = nested
        elem.text = text[start:pos]
        elements.append(elem)
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        return elements, pos


def _parse_options(elem: Element, allowed: tuple[str, ...]) -> dict[str, str]:
    opts: dict[str, str] = {}
    for item in elem.options.split():
        key, _, value = item.partition("=")
        if key not in allowed:
            known = ", ".join(allowed) or "none"
            raise _error(f"unknown option '{key}' for pass '{elem.name}' (options: {known})", elem.col)
        opts[key.replace("-", "_")] = value
    return opts


def _contains_any(e: Element, names: tuple[str, ...]) -> str | None:
    if e.name in names:
        return e.name
    for n in e.nested or ():
        hit = _contains_any(n, names)
        if hit:
            return hit
    return None


def _contains_tidal(elements: list[Element]) -> Element | None:
    for e in elements:
        if lookup_pass(e.name) or lookup_pipeline(e.name):
            return e
        if e.nested:
            hit = _contains_tidal(e.nested)
            if hit:
                return hit
    return None


class TidalPassFailure:
    """Carries the error out of a Python pass (MLIR only lets it signal failure)."""

    def __init__(self):
        self.error: TidalError | None = None
        self.after: str | None = None


def _python_pass(fn, name: str, failure: TidalPassFailure, **options):
    def run(op, pass_):
        try:
            fn(op, **options)
        except TidalError as e:
            failure.error = e
            pass_.signal_pass_failure()

    run.__name__ = name.replace("-", "_")
    return run


def _verify_after(element_name: str, failure: TidalPassFailure, print_ir: bool, verify: bool = True):
    def run(op, pass_):
        if print_ir:
            print(f"// -----// IR Dump After {element_name} //----- //\n{op}", file=sys.stderr)
        errors = verify_module(op) if verify else []
        if errors:
            failure.error = errors[0]
            failure.after = element_name
            pass_.signal_pass_failure()

    run.__name__ = "tidal_verify_after"
    return run


# MLIR passes that crash (SIGSEGV) on modules holding unregistered ops, found by hostile-input
# testing. The first group walks symbol tables: MLIR treats an unregistered op with ONE region
# (tidal.scan/map/associative_scan) as a potential symbol table and dereferences a null symbol
# reference. The second group crashes on any unregistered op. tidal-opt refuses them, with a
# located error, while such ops remain.
UNSAFE_WITH_UNREGISTERED_OPS = (
    "inline",
    "remove-dead-values",
    "normalize-memrefs",
    "scalarize-single-element-tensor-return",
    "torch-shape-refinement-pipeline",
    "torchdynamo-export-to-torch-backend-pipeline",
    "math-extend-to-supported-types",
    "xegpu-vector-linearize",
)
LOWERS_TIDAL_OPS = "tidal-lower-to-scf"
# Once both have run no tidal op remains (the region ops, then tidal.aten_call), and the verifier
# would only walk the rest of the lowering's ops in Python (seconds on an unrolled 512-step graph).
LOWER_EVERY_TIDAL_OP = (LOWERS_TIDAL_OPS, "tidal-aten-calls-to-runtime")


def _unregistered_op(module_op) -> str | None:
    ctx = module_op.context
    found: list[str] = []

    def visit(op):
        if not ctx.is_registered_operation(op.name):
            found.append(op.name)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    return found[0] if found else None


def build_pass_manager(
    pipeline_text: str,
    ctx: ir.Context,
    verify_each: bool = True,
    print_after_all: bool = False,
    module_op=None,
) -> tuple[passmanager.PassManager, TidalPassFailure]:
    """A module-anchored PassManager for `pipeline_text`; raises PipelineError on bad text.

    After each pipeline element the tidal verifier runs and, with `print_after_all`, the IR is
    printed to stderr in mlir-opt's `IR Dump After` format.
    """
    failure = TidalPassFailure()
    pm = passmanager.PassManager("builtin.module", context=ctx)
    unregistered = _unregistered_op(module_op) if module_op is not None else None

    lowered: set[str] = set()

    def add(elements: list[Element], col_base: int = 0, via: str | None = None):
        nonlocal unregistered
        for e in elements:
            col = e.col if via is None else col_base
            unsafe = _contains_any(e, UNSAFE_WITH_UNREGISTERED_OPS)
            if unsafe and unregistered:
                raise _error(
                    f"pass '{unsafe}' cannot run while tidal ops remain: this MLIR pass crashes on "
                    f"unregistered ops such as '{unregistered}' (one-region ones look like symbol "
                    f"tables to it); lower them first ({LOWERS_TIDAL_OPS})",
                    col,
                )
            if e.name == LOWERS_TIDAL_OPS and unregistered and unregistered.startswith("tidal."):
                unregistered = None
            pipe = lookup_pipeline(e.name)
            tpass = lookup_pass(e.name)
            if pipe is not None:
                if e.options or e.nested is not None:
                    raise _error(f"pipeline '{e.name}' takes no options or nested passes", col)
                add(parse_pipeline(pipe.text), col, via=e.name)
                continue
            if tpass is not None:
                if e.nested is not None:
                    raise _error(f"'{e.name}' is a pass, not an op anchor", col)
                opts = _parse_options(e, tpass.options)
                pm.add(_python_pass(tpass.run, e.name, failure, **opts), e.name, e.name)
                if e.name in LOWER_EVERY_TIDAL_OP:
                    lowered.add(e.name)
            else:
                if e.nested:
                    hit = _contains_tidal(e.nested)
                    if hit is not None:
                        raise _error(
                            f"tidal pass '{hit.name}' runs on builtin.module: write it at the top "
                            f"level of the pipeline, not inside '{e.name}(...)'",
                            hit.col,
                        )
                try:
                    pm.add(e.text)
                except ValueError:
                    raise _error(
                        f"'{e.text}' is not a tidal pass or pipeline, nor a registered MLIR pass "
                        f"with valid options (see tidal-opt --list-passes)",
                        col,
                    ) from None
            verify = verify_each and len(lowered) < len(LOWER_EVERY_TIDAL_OP)
            if verify or print_after_all:
                pm.add(_verify_after(e.name, failure, print_after_all, verify), "tidal-verify-after")

    add(parse_pipeline(pipeline_text))
    return pm, failure


def run_pipeline(
    module_op, pipeline_text: str, ctx: ir.Context, verify_each: bool = True, print_after_all: bool = False
):
    """Run `pipeline_text` on `module_op`; raises TidalError / ir.MLIRError on failure."""
    pm, failure = build_pass_manager(pipeline_text, ctx, verify_each, print_after_all, module_op)
    try:
        pm.run(module_op)
    except ir.MLIRError:
        if failure.error is not None:
            raise _with_context(failure) from None
        raise


def _with_context(failure: TidalPassFailure) -> TidalError:
    e = failure.error
    if failure.after:
        notes = e.notes + (f"the tidal verifier failed after pass '{failure.after}'",)
        return type(e)(e.message, e.loc, notes)
    return e
