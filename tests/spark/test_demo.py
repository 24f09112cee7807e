"""The consume-transform-produce demo, end to end: SIGKILLed three times, each in the middle of a micro-batch (its
output staged, not committed; a kill may land in the replay of a batch an earlier kill interrupted), restarted from
its checkpoint each time, exactly once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "ctp_demo.py"


@pytest.mark.slow
def test_demo_proves_exactly_once_after_three_kills(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--lake", str(tmp_path / "lake"), "--records", "400", "--kills", "3",
         "--seed", "3"],
        capture_output=True, text=True, timeout=900,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    kills = re.findall(r"SIGKILLed the streaming driver \(pid \d+\) with (\d+) of 400 records published, in the "
                       r"middle of micro-batch (\d+) \((\d+) segment file\(s\) staged, not committed\)", out)
    assert len(kills) == 3, out
    assert all(int(staged) > 0 for _at, _batch, staged in kills), out
    assert "were in flight when killed" in out, out
    assert re.search(r"and \d+ records in \d+ aborted transactions", out), out
    assert "3 kill(s)" in out, out
    m = re.search(r"records in: (\d+), records out: (\d+), duplicates (\d+), missing (\d+)", out)
    assert m, out
    assert m.groups() == ("400", "400", "0", "0")
    assert "EXACTLY ONCE" in out and "NOT EXACTLY ONCE" not in out
