"""Packaging: what ``pip install txnlog`` declares, the test pins inside the declared ranges, ``txnlog --version``,
and an install into a fresh environment next to the newest pyspark (slow: it downloads from the package index)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
CONSTRAINTS = {name: ROOT / "constraints" / f"{name}.txt" for name in ("newest", "oldest")}
BIN = Path(sys.executable).parent


def requirements(extra: str | None = None) -> dict[str, Requirement]:
    """The project's requirements (``extra``: those of that extra) by canonical name."""
    items = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    reqs = [Requirement(r) for r in items]
    return {canonicalize_name(r.name): r for r in reqs if canonicalize_name(r.name) != "txnlog"}


def pins(name: str) -> dict[str, Version]:
    out = {}
    for line in CONSTRAINTS[name].read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{name}.txt: {line!r} is not an exact pin"
            out[canonicalize_name(req.name)] = Version(spec.version)
    return out


#: Backends imported only when a URL of theirs is opened, and the extra each may use.
BACKEND_EXTRAS = {ROOT / "src" / "coordinator" / "backends" / "azure.py": "azure"}


def imported_modules(where: Path, *, module_level: bool = False, skip: frozenset[Path] = frozenset()) -> set[str]:
    """Top-level names of every module imported anywhere in the package or module ``where`` (functions' local
    imports too; with ``module_level``, only imports that run when a module is imported), except in ``skip``."""
    names: set[str] = set()
    for path in where.rglob("*.py") if where.is_dir() else [where]:
        if path in skip:
            continue
        tree = ast.parse(path.read_text(), str(path))
        nodes = _module_level(tree) if module_level else list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """Statements run at import: the module body and its try/if blocks, not functions nor ``TYPE_CHECKING``."""
    out: list[ast.AST] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        out.append(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(getattr(node, field, []) or [])
    return out


def test_txnlog_version_is_the_installed_package_version() -> None:
    out = subprocess.run([str(BIN / "txnlog"), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"txnlog {md.version('txnlog')}" == f"txnlog {PROJECT['version']}"


@pytest.mark.parametrize(
    ("packages", "extra"),
    [(["coordinator"], None), (["txnsource", "txnsink", "pyspark_txnlog.py"], "spark")],
    ids=["core", "spark"],
)
def test_every_third_party_import_is_declared(packages: list[str], extra: str | None) -> None:
    """``coordinator`` needs only the base requirements; the Spark packages may use the ``spark`` extra too."""
    declared = set(requirements()) | set(requirements("gcs"))  # gcsfs: imported only when a gs:// store is opened
    if extra:
        declared |= set(requirements(extra))
    optional = set(requirements("notebook"))  # plots: imported only inside the functions that draw them
    dists = md.packages_distributions()
    local = {"coordinator", "txnsource", "txnsink", "pyspark_txnlog"}
    missing = {}
    backends = frozenset(BACKEND_EXTRAS)
    for pkg in packages:
        mods = imported_modules(ROOT / "src" / pkg, skip=backends)
        eager = imported_modules(ROOT / "src" / pkg, module_level=True, skip=backends)
        for mod in sorted(mods - local - set(sys.stdlib_module_names) - {"__future__"}):
            owners = {canonicalize_name(d) for d in dists.get(mod, [mod])}
            allowed = declared if mod in eager else declared | optional
            if not owners & allowed:
                missing[mod] = sorted(owners)
    if "coordinator" in packages:
        for path, backend_extra in BACKEND_EXTRAS.items():
            for mod in sorted(imported_modules(path) - local - set(sys.stdlib_module_names) - {"__future__"}):
                owners = {canonicalize_name(d) for d in dists.get(mod, [mod])}
                if not owners & (declared | set(requirements(backend_extra))):
                    missing[mod] = sorted(owners)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_backends_of_optional_extras_are_imported_only_when_their_url_is_opened() -> None:
    for path in BACKEND_EXTRAS:
        module = "coordinator.backends." + path.stem
        for src in (ROOT / "src").rglob("*.py"):
            assert src == path or not _imports_at_module_level(src, module), (
                f"{src} imports {module} at module level: it needs the {BACKEND_EXTRAS[path]!r} extra")


def _imports_at_module_level(src: Path, module: str) -> bool:
    tree = ast.parse(src.read_text(), str(src))
    for node in _module_level(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            return True
        if isinstance(node, ast.Import) and any(a.name == module for a in node.names):
            return True
    return False


@pytest.mark.parametrize("which", ["newest", "oldest"])
def test_test_pins_sit_inside_the_declared_ranges(which: str) -> None:
    pinned = pins(which)
    declared = {**requirements(), **requirements("spark"), **requirements("gcs"), **requirements("test")}
    for name, req in declared.items():
        assert name in pinned, f"{which}.txt pins no version of {name}"
        assert req.specifier.contains(pinned[name], prereleases=True), \
            f"{which}.txt pins {name}=={pinned[name]} outside {req}"


def test_lower_bounds_are_the_oldest_tested_versions() -> None:
    """Every lower bound of a runtime requirement is the version ``constraints/oldest.txt`` tests."""
    oldest = pins("oldest")
    for name, req in {**requirements(), **requirements("spark"), **requirements("gcs")}.items():
        lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert lows, f"{req} has no lower bound"
        assert oldest[name] == lows[0], f"{req}: the oldest tested version is {oldest[name]}"


def test_pyspark_and_pandas_are_bounded_below_their_next_major() -> None:
    for name, major in (("pyspark", 5), ("pandas", 3), ("numpy", 3)):
        req = {**requirements(), **requirements("spark")}[name]
        assert not req.specifier.contains(Version(f"{major}.0.0")), f"{req} admits {name} {major}"


@pytest.mark.slow
def test_install_next_to_the_newest_pyspark_keeps_it(tmp_path: Path) -> None:
    """A user's environment with the newest pyspark: installing ``txnlog[spark]`` neither downgrades pyspark nor
    fails to resolve, and the packages, the format's entry module and the CLI work."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def pip(*args: str) -> None:
        run = subprocess.run([str(py), "-m", "pip", "install", "--quiet", *args], capture_output=True, text=True,
                             env=env, timeout=1500)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    pip("pyspark>=4.3.0,<5")
    before = subprocess.run([str(py), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True,
                            text=True, env=env, check=True).stdout.strip()
    pip(f"{ROOT}[spark]")
    pip("--dry-run", f"pyspark=={before}", f"{ROOT}[spark]")  # asking for both at once resolves too
    code = ("import importlib.metadata as md, coordinator, txnsource, txnsink, pyspark_txnlog, pyspark; "
            "from coordinator.jvm import JAR; "
            "print(pyspark.__version__, md.version('txnlog'), pyspark_txnlog.DefaultSource.name(), "
            "JAR.is_file() and JAR.stat().st_size > 0)")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [before, PROJECT["version"], "txnlog", "True"]  # the wheel ships the rule's jar
    assert Version(before) >= Version("4.3.0")
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 0, check.stdout
    cli = subprocess.run([str(venv / "bin" / "txnlog"), "--version"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert cli.returncode == 0 and cli.stdout.strip() == f"txnlog {PROJECT['version']}", cli.stderr
