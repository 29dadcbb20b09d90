"""One registration entry per tidal op, in the style of JAX's `loops.py`.

Each op module ends with a single `register(OpRules(...))` naming every rule the compiler has for
that op. A pass that needs an op-specific rule looks it up here (`rules_for(op.name).lower_to_scf`)
instead of switching on op names, so adding an op or a rule touches one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tidal.diagnostics import TidalUnsupported


class Pending:
    """A rule slot not filled yet: calling it raises an actionable, located error."""

    def __init__(self, slot: str, lands_with: str):
        self.slot = slot
        self.lands_with = lands_with

    def __call__(self, op, *args, **kwargs):
        raise TidalUnsupported(
            f"'{op.name}' has no {self.slot} rule yet (it lands with {self.lands_with}); "
            f"run this program in eager PyTorch meanwhile",
            op.location,
        )

    def __repr__(self) -> str:
        return f"Pending({self.slot!r}, lands with {self.lands_with!r})"


def is_pending(rule) -> bool:
    return isinstance(rule, Pending)


@dataclass(frozen=True)
class OpRules:
    """Everything tidal knows about one op.

    verify(op)              raises TidalVerifyError naming the op, position and types.
    build(...)              creates the op (op-specific signature, see the op's module).
    lower_to_scf(op, ...)   replaces the op by scf/tensor IR (CPU path).
    autodiff(op, ...)       reverse-mode rule.
    triton(op, ...)         GPU (Triton `tt`) lowering rule.
    """

    name: str
    summary: str
    verify: Callable
    build: Callable
    lower_to_scf: Callable = Pending("lower-to-scf", "the CPU backend issue")
    autodiff: Callable = Pending("autodiff", "the autodiff issue")
    triton: Callable = Pending("GPU (Triton)", "the GPU backend issue")


_RULES: dict[str, OpRules] = {}

YIELD = "tidal.yield"


def register(rules: OpRules) -> OpRules:
    if rules.name in _RULES:
        raise ValueError(f"{rules.name} registered twice")
    _RULES[rules.name] = rules
    return rules


def rules_for(op_name: str) -> OpRules | None:
    return _RULES.get(op_name)


def region_op_names() -> tuple[str, ...]:
    return tuple(_RULES)


def all_rules() -> tuple[OpRules, ...]:
    return tuple(_RULES.values())
