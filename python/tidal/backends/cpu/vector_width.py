"""`tidal-prefer-wide-vectors`: let LLVM vectorize compiled loops with the host's widest vectors.

LLVM's x86 cost model caps auto-vectorization at 256 bits even where AVX-512 is present
(`prefer-vector-width` defaults to 256 on those CPUs, against the clock drop of older Xeons under
512-bit code). tidal's elementwise loops are compute-bound polynomials (`tidal-fast-math`: tanh,
exp, erf) and reductions, where twice the lanes is what counts. Measured on the 2-core Xeon VM,
1 thread, medians of 3 bench runs each: attention [4,64,32] 0.067 -> 0.062 ms, conv block
2.91 -> 2.82 ms, RNN scan forward 1.82 -> 1.78 ms. The attribute is a preference:
without AVX-512 the legal width (256) still applies, so the same code runs everywhere it did.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import tidal_pass


@tidal_pass(
    "tidal-prefer-wide-vectors",
    "Mark every llvm.func definition prefer-vector-width=<width> (default 512)",
    options=("width",),
)
def prefer_wide_vectors(module_op, width: str | None = None):
    from tidal.diagnostics import TidalUnsupported

    width = "512" if width is None else width
    if width not in ("128", "256", "512"):
        raise TidalUnsupported(f"width must be 128, 256 or 512 (bits), got '{width}'")
    entry = ir.ArrayAttr.get([ir.StringAttr.get("prefer-vector-width"), ir.StringAttr.get(width)])
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name != "llvm.func" or not len(op.regions[0].blocks):
            continue
        kept = [a for a in ir.ArrayAttr(op.attributes["passthrough"])] if "passthrough" in op.attributes else []
        kept = [a for a in kept if not _names(a, "prefer-vector-width")]
        op.attributes["passthrough"] = ir.ArrayAttr.get(kept + [entry])


def _names(attr: ir.Attribute, key: str) -> bool:
    """A passthrough entry is a string or a [key, value] pair."""
    if isinstance(attr, ir.StringAttr):
        return attr.value == key
    pair = ir.ArrayAttr(attr)
    return len(pair) == 2 and ir.StringAttr(pair[0]).value == key
