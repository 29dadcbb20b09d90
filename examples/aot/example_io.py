"""Write a program's inputs and eager PyTorch's outputs as raw files, for the C example.

    python examples/aot/example_io.py FILE.py DIR

FILE.py defines `model` and `example_inputs` (and optionally `check_inputs`, used instead). DIR
gets in<i>.bin / out<i>.bin (raw little-endian data, row-major) and in<i>.shape / out<i>.shape
(one line: dtype, then the sizes). `run_model DIR` reads the inputs, runs the exported library and
compares its outputs with these.
"""
import sys
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from tidal.tools.tidal_compile import load_program_module

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
          torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16"}


def write(path: Path, stem: str, t: torch.Tensor) -> None:
    t = t.detach().contiguous()
    if t.dtype not in DTYPES:
        raise SystemExit(f"{stem}: dtype {t.dtype} is not written by this example")
    (path / f"{stem}.bin").write_bytes(t.numpy().tobytes())
    (path / f"{stem}.shape").write_text(" ".join([DTYPES[t.dtype], *map(str, t.shape)]) + "\n")


def main(argv):
    if len(argv) != 3:
        raise SystemExit(__doc__)
    source, out = argv[1], Path(argv[2])
    module = load_program_module(source)
    model, inputs = module.model, getattr(module, "check_inputs", module.example_inputs)
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.bin")) + list(out.glob("*.shape")):
        old.unlink()
    with torch.no_grad():
        outputs = pytree.tree_leaves(model(*inputs))
    for i, t in enumerate(inputs):
        write(out, f"in{i}", t)
    for i, t in enumerate(outputs):
        write(out, f"out{i}", t)
    print(f"{out}: {len(inputs)} inputs, {len(outputs)} expected outputs")


if __name__ == "__main__":
    main(sys.argv)
