"""The project's layout holds: the dialect and target-free passes depend on no target, and every
package is installed from where it lives (pyproject's explicit package list)."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_PACKAGES = ("tidal.backends", "tidal.conversion", "tidal.importer", "tidal.runtime", "tidal.dynamo")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_dialect_and_passes_import_no_target():
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for top in ("dialects", "passes")
        for path in sorted((ROOT / top).rglob("*.py"))
        for name in _imports(path)
        if name.startswith(TARGET_PACKAGES)
    ]
    assert not offenders, offenders


def test_loading_dialect_and_passes_loads_no_target():
    code = (
        "import sys, tidal.dialects, tidal.passes; "
        f"print(sorted(m for m in sys.modules if m.startswith({TARGET_PACKAGES!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_dialect_and_passes_are_the_top_level_folders():
    import tidal.dialects
    import tidal.passes

    assert Path(tidal.dialects.__file__).resolve().parent == ROOT / "dialects"
    assert Path(tidal.passes.__file__).resolve().parent == ROOT / "passes"


def test_every_package_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {"tidal": ROOT / "python" / "tidal"} | {
        name: ROOT / folder for name, folder in config["package-dir"].items() if name
    }
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            pkg = ".".join((name, *rel))
            found.add(pkg)
    assert found == listed
