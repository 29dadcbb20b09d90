"""Runtime: calling compiled programs on torch tensors."""

from tidal.runtime.executable import NativeFunction, signature_of

__all__ = ["NativeFunction", "signature_of"]
