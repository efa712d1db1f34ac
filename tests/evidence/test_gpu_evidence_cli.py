"""``python -m orchestrator.cli.evidence``: bad input fails before anything starts, a stage that does not fit the
budget is skipped with its estimate, and a run stopped by SIGTERM (the GPU machine's limit) packs what finished.
The real-engine rehearsal is ``tests/integration/test_gpu_evidence.py``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from orchestrator.cli.evidence import main
from orchestrator.evidence.pack import EVIDENCE_FILE, PACKED_FILES
from orchestrator.paths import PROJECT_ROOT


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--gpu", "H300"], "unknown --gpu 'H300'; valid: B200, H200"),
        (["--budget-s", "0"], "--budget-s 0 is not positive"),
        (["--stages", "cells,cleanup"], "--stages 'cells,cleanup': unknown cleanup; valid: doctor, cells"),
        (["--policies", "fcfs,pinned"], "--policies 'fcfs,pinned': unknown pinned; valid: fcfs"),
        (["--source-cells", "fcfs:fast"], "--source-cells 'fcfs:fast': 'fast' is not a JPS"),
        (["--jps", "-1"], "jps: Input should be greater than 0"),
        (["--stages", "pressure", "--pressure-policies", "lmcache,fcfs"],
         "--pressure-policies 'lmcache,fcfs': the first is the baseline; valid: fcfs first"),
        (["--gpu", "A100", "--stages", "pressure"], "no pressure point on A100: the offload window at 0.5 JPS"),
        (["--stages", "capacity", "--capacity-cells", "fcfs:0"], "--capacity-cells 'fcfs:0': a load must be positive"),
        (["--stages", "capacity", "--capacity-cells", "native-offload:1"],
         "--capacity-cells: native-offload need(s) a CUDA GPU; on cpu valid"),
        (["--stages", "capacity", "--capacity-cells", "fcfs:1", "--slo", "p90=1s"], "--slo 'p90=1s': cannot read"),
        (["--stages", "capacity", "--capacity-cells", "fcfs:20,continuum:4"],
         "--capacity-cells 'fcfs:20,continuum:4': continuum:4 over a 3 s window expects about 12 jobs, too few to "
         "bound jct_p90=30s's percentiles; valid: loads from 18 JPS, or --pressure-window-s 14 or more"),
    ],
)
def test_bad_input_fails_in_one_line_before_anything_starts(tmp_path, capsys, flags, named):
    defaults = {"--gpu": "cpu", "--budget-s": "60"}
    argv = [*(item for flag, value in defaults.items() if flag not in flags for item in (flag, value)), *flags]
    assert main([*argv, "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}") and err.count("\n") == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_the_capacity_stage_runs_its_loads_on_the_pressure_plans_pool_and_tier():
    """On an H100, each POLICY:JPS of --capacity-cells is the pressure plan's cell of that policy at that load."""
    from orchestrator.cli.evidence import parser, plan_from

    plan = plan_from(parser().parse_args(["--gpu", "H100", "--out", "o", "--budget-s", "500", "--stages", "capacity",
                                          "--capacity-cells", "fcfs:1.241,native-offload:2.985", "--slo", "jct_p90=30s",
                                          "--pressure-window-s", "45"]))  # fmt: skip
    point = plan.pressure_point
    assert [(cell.policy, cell.jps, cell.dram_gb) for cell in plan.capacity] == [("fcfs", 1.241, 0.0),
                                                                                   ("native-offload", 2.985, point.dram_gb)]
    for cell in plan.capacity:
        assert cell.engine_options.num_kv_blocks == point.kv_blocks and cell.workload.duration_s == 45
    assert str(plan.slo) == "jct_p90=30s" and plan.pressure == ()


def test_stages_that_do_not_fit_the_budget_are_skipped_with_their_estimate_and_the_rest_say_why_not(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--gpu", "cpu", "--budget-s", "1", "--stages", "cells,profile", "--out", str(out),
                 "--work", str(tmp_path / "work")]) == 0  # fmt: skip
    assert sorted(path.name for path in out.iterdir()) == sorted(PACKED_FILES)
    stages = {stage["name"]: stage for stage in json.loads((out / EVIDENCE_FILE).read_text())["stages"]}
    # A cell per policy of the fewest that run every mechanism, then the profile.
    assert [stage["status"] for stage in stages.values()] == ["skipped"] * 7
    for policy in ("fcfs", "continuum"):  # a first start is estimated at 60 s on cpu
        assert stages[f"cell {policy}"]["detail"].startswith("needs about ")
        assert stages[f"cell {policy}"]["detail"].endswith(" s of the 1 s budget left")
    assert "LMCacheConnectorV1" in stages["cell lmcache"]["facts"]["server_command"]
    assert "LMCacheConnectorV1" in stages["cell lmcache-disk"]["facts"]["server_command"]
    assert "--kv-offloading-backend native" in stages["cell native-offload"]["facts"]["server_command"]
    assert "--kv-offloading-backend native" in stages["cell simple-offload"]["facts"]["server_command"]  # its env picks it
    assert stages["profile"]["detail"] == "no fcfs cell trace to profile"
    closing_table = capsys.readouterr().out.split("\n\nstage ")[1]
    assert all("  skipped     0.0  " in line for line in closing_table.splitlines()[1:8])


def test_sigterm_inside_a_stage_marks_it_cut_and_packs_what_finished(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "orchestrator.cli.evidence", "--gpu", "cpu", "--budget-s", "600", "--stages",
               "doctor", "--out", str(out), "--work", str(tmp_path / "work")]  # fmt: skip
    with subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        next(line for line in run.stdout if "doctor ..." in line)
        child = wait_for_child(run.pid)  # the stage is in flight: the node's stack is being read in a child process
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stdout + stderr
    assert "cut by SIGTERM" in stderr and not psutil.pid_exists(child)
    (doctor,) = json.loads((out / EVIDENCE_FILE).read_text())["stages"]
    assert doctor["status"] == "cut" and doctor["detail"].startswith("SIGTERM")
    assert sorted(path.name for path in out.iterdir()) == sorted(PACKED_FILES)


def wait_for_child(pid: int, timeout_s: float = 60.0) -> int:
    """The child process running the stack probe, once ``subprocess.run`` is waiting on it: its program started (it
    takes seconds to import torch and vLLM), and half a second more for ``Popen`` to return to ``run``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in psutil.Process(pid).children():
            try:
                started = "orchestrator.replica.stack" in " ".join(child.cmdline())
            except psutil.Error:  # forked and gone, or not yet readable
                continue
            if started:
                time.sleep(0.5)
                return child.pid
        time.sleep(0.05)
    raise AssertionError(f"process {pid} started no stack probe in {timeout_s:g} s")
