"""tidal-compile: compile a PyTorch program file and print its IR (stub until the importer lands)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="tidal-compile",
        description=(
            "Compile FILE.py (defining `model` and `example_inputs`) with tidal. "
            "NOT IMPLEMENTED YET: this is a stub until the importer issue fills it in."
        ),
    )
    p.add_argument("file")
    args = p.parse_args(argv)
    print(f"{args.file}:1:1: error: tidal-compile is not implemented yet (the importer issue adds it)", file=sys.stderr)
    return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
