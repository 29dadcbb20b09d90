"""`map`: the adjoint is a map of the body's VJP over (xs, cotangents); the cotangents of the
unmapped arguments (weights) add up over the mapped dim. PyTorch's `MapAutogradOp` implements
exactly this rule with the body's VJP from PyTorch's formulas; tidal registers it as its rule."""

from __future__ import annotations

from torch._higher_order_ops.map import MapAutogradOp

from tidal.autodiff import AUTODIFF
from tidal.autodiff.common import residual_sizes_unbound


class MapVJP(MapAutogradOp):
    @staticmethod
    def backward(ctx, *grads):
        # PyTorch's backward maps the body's VJP, whose fake run makes a nested while_loop's
        # iteration count anew (outside the rule's forward)
        with residual_sizes_unbound(grads):
            return MapAutogradOp.backward(ctx, *grads)


@AUTODIFF.rule("tidal.map")
def map_vjp(f, xs, args):
    """xs and args as residuals; the adjoint maps the body's VJP."""
    with residual_sizes_unbound([*xs, *args]):
        return MapVJP.apply(f, len(xs), *xs, *args)
