"""``python -m orchestrator.cli.cell`` refuses bad input in one line before anything starts. The messages are
made in-process (``main``); one case runs the module, for its exit status and stderr as a process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.cli.cell import main


@pytest.mark.parametrize(
    "flags, named",
    [(["--jps", "0"], "jps"), (["--jps", "-2"], "jps"), (["--scale", "9"], "scale"), (["--block-size", "8"], "--block-size 8"),
     (["--policy", "lmcache"], "lmcache"), (["--policy", "lru"], "lru")],
)
def test_bad_input_fails_fast_with_one_line(tmp_path, capsys, flags, named):
    assert main([*flags, "--out", str(tmp_path / "cell")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]
    assert not (tmp_path / "cell").exists()


def test_the_module_exits_2_with_the_one_line_on_stderr(tmp_path):
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli.cell", "--jps", "0", "--out", str(tmp_path / "cell")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "jps" in line
    assert not (tmp_path / "cell").exists()
