"""`tidal-verify`: run the tidal dialect verifier as a pass (tidal-opt also runs it after each pass)."""

from tidal.dialects import check_module
from tidal.passes.registry import tidal_pass


@tidal_pass("tidal-verify", "Check the structural rules of every tidal op")
def verify(module_op):
    check_module(module_op)
