"""Runtime: calling compiled programs on torch tensors."""

from tidal.runtime import cache
from tidal.runtime.executable import NativeFunction, signature_of

__all__ = ["NativeFunction", "cache", "signature_of"]
