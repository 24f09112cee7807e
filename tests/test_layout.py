"""The package layout the design page describes (docs/design.md, Packages), checked on the imports the source makes:
the protocol core reads on its own, backends never import the factory, and the packages import one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
CORE = ("store", "probe", "layout", "records", "partrecords", "decisions", "state", "txnlog", "groupcommit", "serving",
        "logcheckpoint", "partition", "coordinator", "txntypes", "sweeps", "parallel", "faults", "errors", "redact")
SUBPACKAGES = ("coordinator.inspect", "coordinator.explore", "coordinator.maintenance", "coordinator.cli")


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (lazy imports inside functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def module_files(package: str) -> list[Path]:
    return sorted((SRC / package.replace(".", "/")).rglob("*.py"))


def test_the_store_contract_imports_no_backend_and_no_backend_imports_the_factory() -> None:
    """Backends import the contract and, the cloud ones, what they share (``backends.cloud``), never each other."""
    contract = imports_of(SRC / "coordinator" / "store.py")
    assert not {m for m in contract if m.startswith(("coordinator.backends", "coordinator.store_factory"))}
    for backend in module_files("coordinator.backends"):
        assert "coordinator.store_factory" not in imports_of(backend), backend
        others = {m for m in imports_of(backend) if m.startswith("coordinator.backends.")
                  and not m.startswith("coordinator.backends.cloud")}
        assert not others, (backend, others)
    assert not {m for m in imports_of(SRC / "coordinator" / "backends" / "cloud.py")
                if m.startswith("coordinator.backends.")}


@pytest.mark.parametrize("name", CORE)
def test_the_protocol_core_imports_no_view_cli_maintenance_or_backend(name: str) -> None:
    found = imports_of(SRC / "coordinator" / f"{name}.py")
    assert not {m for m in found if m.startswith((*SUBPACKAGES, "coordinator.backends", "pyspark"))}


def test_packages_import_one_way() -> None:
    for path in module_files("coordinator"):
        assert not {m for m in imports_of(path) if m.split(".")[0] in ("pyspark", "txnsource", "txnsink")}, path
    for a, b in (("txnsource", "txnsink"), ("txnsink", "txnsource")):
        for path in module_files(a):
            assert not {m for m in imports_of(path) if m.split(".")[0] == b}, path


def test_no_flat_operator_or_maintenance_modules_are_left() -> None:
    flat = {p.stem for p in (SRC / "coordinator").glob("*.py")}
    assert not flat & {"inspect", "inspect_common", "inspect_txns", "inspect_verify", "explore", "explore_plots",
                       "humanize", "maintenance", "s3store"}
    for package in SUBPACKAGES:
        assert (SRC / package.replace(".", "/") / "__init__.py").is_file()
