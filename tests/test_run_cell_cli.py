from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "flags, named",
    [(["--jps", "0"], "jps"), (["--jps", "-2"], "jps"), (["--scale", "9"], "scale"), (["--block-size", "8"], "block_size"),
     (["--policy", "lmcache"], "lmcache"), (["--policy", "lru"], "lru")],
)
def test_bad_input_fails_fast_with_one_line(tmp_path, flags, named):
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.run_cell", *flags, "--out", str(tmp_path / "cell")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]
    assert not (tmp_path / "cell").exists()
