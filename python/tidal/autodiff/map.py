"""`map`: the adjoint is a map of the body's VJP over (xs, cotangents); the cotangents of the
unmapped arguments (weights) add up over the mapped dim. PyTorch's `MapAutogradOp` implements
exactly this rule with the body's VJP from PyTorch's formulas; tidal registers it as its rule."""

from __future__ import annotations

from torch._higher_order_ops.map import MapAutogradOp

from tidal.autodiff import AUTODIFF


@AUTODIFF.rule("tidal.map")
def map_vjp(f, xs, args):
    """xs and args as residuals; the adjoint maps the body's VJP."""
    return MapAutogradOp.apply(f, len(xs), *xs, *args)
