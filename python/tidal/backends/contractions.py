"""`tidal-hide-contractions` / `tidal-restore-contractions`: named contractions step aside while
elementwise fusion runs, so each reaches its backend as a named op (a BLAS call or tidal's gemm
kernel on the CPU, cuBLAS through ATen on the GPU). Target-neutral: both backends' pipelines run them.
"""

from __future__ import annotations

import itertools

from torch_mlir import ir

from tidal.passes.registry import tidal_pass

# Elementwise fusion (`linalg-fuse-elementwise-ops`) folds the reshapes around a named contraction
# into it, generalizing it into a higher-rank generic that neither BLAS nor cuBLAS receives (a
# matmul of [T·B, H] views becomes naive loops). The contractions step aside while it runs: each
# moves into a holder module, an opaque placeholder keeps its operands and uses, and it comes back
# in the placeholder's place (with whatever operands fusion left it).
CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot")
_hidden: dict[int, tuple] = {}
_hidden_ids = itertools.count(1)
_HIDDEN_ATTR = "tidal.hidden_contractions"


@tidal_pass("tidal-hide-contractions", "Move named contractions out of the way of elementwise fusion (see tidal-restore-contractions)")
def hide_contractions(module_op):
    from tidal.passes.registry import ops_named

    with module_op.context, module_op.location:
        holder = ir.Module.create()
        with ir.InsertionPoint(holder.body):
            anchor = ir.Operation.create("hidden.anchor")
        pairs = []
        for op in ops_named(module_op, CONTRACTIONS):
            with ir.InsertionPoint(op), op.location:
                placeholder = ir.Operation.create(
                    "hidden.contraction", results=[r.type for r in op.results], operands=list(op.operands)
                )
            for old, new in zip(op.results, placeholder.results):
                old.replace_all_uses_with(new)
            op.move_before(anchor)
            pairs.append((op, placeholder))
        key = next(_hidden_ids)
        _hidden[key] = (holder, anchor, pairs)
        module_op.attributes[_HIDDEN_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key)


@tidal_pass("tidal-restore-contractions", "Put back the contractions tidal-hide-contractions moved aside")
def restore_contractions(module_op):
    if _HIDDEN_ATTR not in module_op.attributes:
        return
    key = ir.IntegerAttr(module_op.attributes[_HIDDEN_ATTR]).value
    del module_op.attributes[_HIDDEN_ATTR]
    _holder, _anchor, pairs = _hidden.pop(key)
    for op, placeholder in pairs:
        op.move_before(placeholder)
        for i, v in enumerate(placeholder.operands):
            op.operands[i] = v
        for old, new in zip(placeholder.results, op.results):
            old.replace_all_uses_with(new)
        placeholder.erase()
