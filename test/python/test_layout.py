"""The project's layout holds: the dialect and target-free passes depend on no target, imports
follow the layers (`LAYERS`), and every package is installed from where it lives (pyproject's
explicit package list)."""

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


# The layers, lowest first, as module-name prefixes (the longest prefix names a module's layer; a
# trailing `$` names that one module only),
# and what each may import besides itself, `neutral` and the package root (`from tidal import
# __version__`; importing any tidal module loads it anyway):
#   dialects <- passes <- conversion <- backends.{cpu, gpu}, which share backends.shared only;
#   importer and autodiff know no backend and no driver; the runtime knows no code generator
#   (conversion, backends) -- it reads a function's signature with the passes' IR helpers.
LAYERS = {
    "neutral": ("tidal.diagnostics", "tidal.context", "tidal.tracing"),
    "dialects": ("tidal.dialects",),
    "passes": ("tidal.passes",),
    "conversion": ("tidal.conversion",),
    "backends.shared": ("tidal.backends$", "tidal.backends.contractions"),
    "backends.cpu": ("tidal.backends.cpu",),
    "backends.gpu": ("tidal.backends.gpu",),
    "importer": ("tidal.importer",),
    "autodiff": ("tidal.autodiff",),
    "runtime": ("tidal.runtime",),
    "drivers": ("tidal.compiler", "tidal.dynamo", "tidal.aot", "tidal.tools", "tidal.init_all"),
}
MAY_IMPORT = {
    "neutral": set(),
    "dialects": set(),
    "passes": {"dialects"},
    "conversion": {"dialects", "passes"},
    "backends.shared": {"dialects", "passes", "conversion", "runtime"},
    "backends.cpu": {"dialects", "passes", "conversion", "backends.shared", "runtime"},
    "backends.gpu": {"dialects", "passes", "conversion", "backends.shared", "runtime"},
    "importer": {"dialects", "runtime"},
    "autodiff": {"dialects"},
    "runtime": {"passes"},
    "drivers": set(LAYERS),
}
SOURCE_ROOTS = {"tidal": ROOT / "python" / "tidal", "tidal.dialects": ROOT / "dialects", "tidal.passes": ROOT / "passes"}


def _module_name(path: Path) -> str:
    for name, folder in sorted(SOURCE_ROOTS.items(), key=lambda item: -len(str(item[1]))):
        if folder in path.parents:
            parts = list(path.relative_to(folder).with_suffix("").parts)
            return ".".join([name, *(parts[:-1] if parts[-1] == "__init__" else parts)])
    raise AssertionError(f"{path} is under no source root")


def _imported_names(path: Path):
    """Every module `path` imports (at any depth: inside functions too), a `from m import x` as
    `m.x` (x may be a submodule), relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            yield from (f"{base}.{a.name}" for a in node.names)


def _layer(module: str) -> str | None:
    """The layer of a tidal module (None: the package root, or a module no layer names)."""
    best = max(((prefix, layer) for layer, prefixes in LAYERS.items() for prefix in prefixes
                if module == prefix.rstrip("$") or (not prefix.endswith("$") and module.startswith(prefix + "."))),
               key=lambda pl: len(pl[0]), default=None)
    return best[1] if best else None


def _source_files():
    return sorted(p for folder in SOURCE_ROOTS.values() for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    orphans = [str(p.relative_to(ROOT)) for p in _source_files() if _module_name(p) != "tidal" and _layer(_module_name(p)) is None]
    assert not orphans, f"modules in no layer (add them to LAYERS): {orphans}"


def _names_the_root(name: str) -> bool:
    """`tidal` itself, or a name its __init__ defines (`from tidal import __version__`)."""
    if name == "tidal":
        return True
    rest = name.removeprefix("tidal.")
    return "." not in rest and not any((SOURCE_ROOTS["tidal"] / f).exists() for f in (rest, f"{rest}.py"))


def test_imports_follow_the_layers():
    """Each file imports only its own layer, `neutral`, the package root and what `MAY_IMPORT`
    allows its layer; imports inside functions count."""
    offenders = []
    for path in _source_files():
        own = _layer(_module_name(path))
        if own is None:
            continue  # the package root (tidal/__init__.py: the public API, a driver's view)
        for name in _imported_names(path):
            if not (name == "tidal" or name.startswith("tidal.")) or _names_the_root(name):
                continue
            target = _layer(name)
            if target in (own, "neutral") or target in MAY_IMPORT[own]:
                continue
            offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "\n".join(["imports against the layers:", *offenders])


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
