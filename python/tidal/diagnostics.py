"""Located errors: every user-facing failure names a FILE:LINE:COL and a message."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FILE_LINE_COL = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


_PATH_ALIASES: dict[str, str] = {}


def alias_path(path: str, shown_as: str) -> None:
    """Report locations in `path` (a temporary copy) as `shown_as` (the user's file name)."""
    _PATH_ALIASES[path] = shown_as


def source_loc(location) -> SourceLoc | None:
    """The first file:line:col inside an MLIR location (plain, named, callsite or fused)."""
    if location is None:
        return None
    if isinstance(location, SourceLoc):
        return location
    m = _FILE_LINE_COL.search(str(location))
    if not m:
        return None
    path = m.group(1)
    return SourceLoc(_PATH_ALIASES.get(path, path), int(m.group(2)), int(m.group(3)))


class TidalError(Exception):
    """An error with a source location, printed as `FILE:LINE:COL: error: message`."""

    def __init__(self, message: str, location=None, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.location = location  # as given (an MLIR location: what a backend's fallback reads)
        self.loc = source_loc(location)
        self.notes = tuple(notes)

    def format(self, severity: str = "error") -> str:
        where = f"{self.loc}: " if self.loc else ""
        lines = [f"{where}{severity}: {self.message}"]
        lines += [f"{where}note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


class TidalPerformanceWarning(UserWarning):
    """tidal compiles the program, in a form much slower than its usual one (the message says
    why, at the user's line): a scan run one step at a time on the GPU."""


class TidalVerifyError(TidalError):
    """A tidal op broke one of its structural rules."""


class TidalUnsupported(TidalError):
    """A feature tidal does not (yet) compile; the message says what to do instead."""


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning" | "note" | "remark"
    message: str
    loc: SourceLoc | None

    def format(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        return f"{where}{self.severity}: {self.message}"


def diagnostics_from_mlir_error(err) -> list[Diagnostic]:
    """Flatten an `ir.MLIRError` (with its attached notes) into Diagnostics."""
    out: list[Diagnostic] = []

    def visit(d):
        sev = str(d.severity).rsplit(".", 1)[-1].lower()
        out.append(Diagnostic(sev, d.message, source_loc(d.location)))
        for n in d.notes:
            visit(n)

    diags = list(getattr(err, "error_diagnostics", []) or [])
    for d in diags:
        visit(d)
    if not out:
        out.append(Diagnostic("error", str(err), None))
    return out


def diagnostics_from_exception(exc: BaseException) -> list[Diagnostic]:
    from torch_mlir import ir

    if isinstance(exc, ir.MLIRError):
        return diagnostics_from_mlir_error(exc)
    if isinstance(exc, TidalError):
        return [Diagnostic("error", exc.message, exc.loc)] + [
            Diagnostic("note", n, exc.loc) for n in exc.notes
        ]
    return [Diagnostic("error", f"{type(exc).__name__}: {exc}", None)]
