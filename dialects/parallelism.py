"""`tidal.parallelism`: how many iterations of an `scf.forall` the target runs at once, read at
run time.

    %n = "tidal.parallelism"() : () -> index
A target-free lowering that may emit a parallel form (the blocked `tidal.associative_scan`) sizes
it and chooses it by this value, without naming a target's thread runtime: each backend lowers the
op (the CPU backend: the size of torch's OpenMP team, `omp_get_max_threads()`, in
`tidal-parallelism-to-threads`).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects.checks import OpChecker
from tidal.dialects.registry import OpEntry, register

NAME = "tidal.parallelism"


def verify_parallelism(op):
    c = OpChecker(op)
    if len(c.op.operands):
        c.fail(f"takes no operands, got {len(c.op.operands)}")
    if list(c.op.regions):
        c.fail("takes no regions")
    results = list(c.op.results)
    if len(results) != 1 or not isinstance(results[0].type, ir.IndexType):
        c.fail(f"must have one result of type index, got ({', '.join(str(r.type) for r in results)})")


def build_parallelism(loc=None):
    """The op, at the current insertion point; its result is the index value."""
    return ir.Operation.create(NAME, results=[ir.IndexType.get()], loc=loc or ir.Location.current)


PARALLELISM = register(
    OpEntry(
        name=NAME,
        summary="iterations of an scf.forall the target runs at once (run time)",
        doc=__doc__,
        verify=verify_parallelism,
        build=build_parallelism,
        operands=(),
        attributes=(),
        regions=(),
        results=(("count", "index >= 1: the target's parallel width (CPU: torch's thread team size)"),),
    )
)
