"""One registration entry per tidal op, and the transformations that attach rules to it.

The dialect defines each op (verifier, builder, documentation) and knows no target. A
transformation (lowering to scf, autodiff, the GPU lowering) declares itself here and attaches its
per-op rules from its own package, as MLIR attaches interface implementations from outside a
dialect (external models). A pass that needs an op-specific rule asks the transformation
(`LOWER_TO_SCF.rule_for(op)`) instead of switching on op names, and `tidal-opt --describe-op NAME`
prints an op's whole story from one entry: definition plus every rule attached to it, and where.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Callable

from tidal.diagnostics import TidalUnsupported

YIELD = "tidal.yield"


@dataclass(frozen=True)
class Rule:
    """A transformation's rule for one op: the function and where it is defined."""

    transformation: str
    fn: Callable

    @property
    def where(self) -> str:
        return self.location()

    def location(self, line_numbers: bool = True) -> str:
        """`module.qualname (path:line)`; without the line when `line_numbers` is false."""
        fn = inspect.unwrap(self.fn)
        name = f"{fn.__module__}.{fn.__qualname__}"
        try:
            path = inspect.getsourcefile(fn)
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            return name
        return f"{name} ({_display_path(path)}{f':{line}' if line_numbers else ''})"


@dataclass
class OpEntry:
    """Everything tidal knows about one op.

    verify(op)    raises TidalVerifyError naming the op, position and types.
    build(...)    creates the op (op-specific signature, see the op's module).
    doc, operands, attributes, regions, results: the op's documentation, as
                  `tidal-opt --describe-op` prints it ((name, description) pairs).
    rules         filled by transformations (`Transformation.rule`), keyed by their names.
    """

    name: str
    summary: str
    verify: Callable
    build: Callable
    doc: str
    operands: tuple[tuple[str, str], ...]
    attributes: tuple[tuple[str, str], ...]
    regions: tuple[tuple[str, str], ...]
    results: tuple[tuple[str, str], ...]
    rules: dict[str, Rule] = field(default_factory=dict)

    def rule(self, transformation: str) -> Rule | None:
        return self.rules.get(transformation)

    def describe(self, line_numbers: bool = True) -> str:
        """The op's definition and every transformation's rule for it (`--describe-op`).

        `line_numbers=False` leaves the lines out of the locations (docs/dialect.md, see
        `tidal.tools.tidal_opt.describe_dialect`).
        """
        body = self.doc.strip().split("\n", 1)[1] if "\n" in self.doc.strip() else ""
        lines = [f"{self.name}: {self.summary}", "", *("  " + ln if ln else "" for ln in body.strip("\n").splitlines())]
        for title, pairs in (
            ("operands", self.operands),
            ("attributes", self.attributes),
            ("regions", self.regions),
            ("results", self.results),
        ):
            lines += ["", f"{title}:"]
            lines += [f"  {name:14s} {text}" for name, text in pairs] or ["  (none)"]
        lines += ["", "defined by the dialect:"]
        lines += [f"  {'verifier':14s} {Rule('verify', self.verify).location(line_numbers)}"]
        lines += [f"  {'builder':14s} {Rule('build', self.build).location(line_numbers)}"]
        lines += ["", "rules attached by transformations:"]
        lines += [f"  {name:14s} {rule.location(line_numbers)}" for name, rule in sorted(self.rules.items())] or ["  (none)"]
        absent = sorted(t.name for t in all_transformations() if t.name not in self.rules)
        if absent:
            lines.append(f"  (no rule from: {', '.join(absent)})")
        return "\n".join(lines)


@dataclass(frozen=True)
class Transformation:
    """A family of per-op rules (an "interface" in MLIR's terms) declared by the package using it."""

    name: str
    summary: str

    def rule(self, op_name: str):
        """Decorator attaching `fn` as this transformation's rule for `op_name`."""

        def attach(fn):
            entry = _OPS.get(op_name)
            if entry is None:
                raise ValueError(f"{self.name}: no op named {op_name} (ops: {', '.join(_OPS)})")
            if self.name in entry.rules:
                raise ValueError(f"{self.name} rule for {op_name} registered twice")
            entry.rules[self.name] = Rule(self.name, fn)
            return fn

        return attach

    def rule_for(self, op) -> Callable:
        """The rule for `op` (an ir.Operation); a located, actionable error when there is none."""
        entry = _OPS.get(op.name)
        rule = entry.rule(self.name) if entry is not None else None
        if rule is None:
            raise TidalUnsupported(
                f"'{op.name}' op has no {self.name} rule ({self.summary}); "
                f"`tidal-opt --describe-op {op.name}` lists the rules it has",
                op.location,
            )
        return rule.fn


_OPS: dict[str, OpEntry] = {}
_TRANSFORMATIONS: dict[str, Transformation] = {}


def register(entry: OpEntry) -> OpEntry:
    if entry.name in _OPS:
        raise ValueError(f"{entry.name} registered twice")
    _OPS[entry.name] = entry
    return entry


def declare_transformation(name: str, summary: str) -> Transformation:
    if name in _TRANSFORMATIONS:
        raise ValueError(f"transformation {name} declared twice")
    _TRANSFORMATIONS[name] = t = Transformation(name, summary)
    return t


def op_entry(op_name: str) -> OpEntry | None:
    return _OPS.get(op_name)


def op_names() -> tuple[str, ...]:
    return tuple(_OPS)


def region_op_names() -> tuple[str, ...]:
    """The control-flow ops (those with regions)."""
    return tuple(name for name, entry in _OPS.items() if entry.regions)


def all_ops() -> tuple[OpEntry, ...]:
    return tuple(_OPS.values())


def all_transformations() -> tuple[Transformation, ...]:
    return tuple(_TRANSFORMATIONS.values())


def _display_path(path: str) -> str:
    """Paths inside the project as written in its tree (`dialects/scan.py`), others in full."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.abspath(path)
    return os.path.relpath(path, root) if path.startswith(root + os.sep) else path
