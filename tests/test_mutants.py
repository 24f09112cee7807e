"""Test strength: every single-line mutant of the protocol core listed in ``scripts/mutants.py`` is killed by the
tests that guard it (see ``docs/reliability.md``, "Mutants"). Slow (a few minutes): one pytest run per mutant."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "mutants.py"


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_harness", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_listed_mutant_of_the_core_is_killed() -> None:
    names = [m.name for m in _harness().MUTANTS]
    assert len(names) >= 13
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=1100, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    results = {line.split()[1]: line.split()[0] for line in run.stdout.splitlines()
               if line.split()[:1] and line.split()[0] in ("KILLED", "SURVIVED", "ERROR")}
    assert results == dict.fromkeys(names, "KILLED"), out
