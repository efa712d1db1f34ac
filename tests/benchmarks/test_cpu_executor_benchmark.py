"""The CPU executor benchmark's machinery, without vLLM: medians per executor and the multiprocess one over the
in-process one (the real cells are the benchmark's own run, docs/measured.md); each executor's command line as vLLM
reads it."""

from __future__ import annotations

from benchmarks.cpu_executor import EXECUTORS, engine_config, summarize
from orchestrator.replica.vllm_server import vllm_server_command


def test_the_medians_are_per_executor_and_the_ratios_multiprocess_over_in_process():
    trials = {"in-process": [{"server_cpu_s": 10.0, "jct_mean_s": 5.0}, {"server_cpu_s": 14.0, "jct_mean_s": 6.0}],
              "multiprocess": [{"server_cpu_s": 24.0, "jct_mean_s": 8.0},
                               {"server_cpu_s": 30.0, "jct_mean_s": 7.0}]}  # fmt: skip
    summary = summarize(trials)
    assert summary["medians"]["in-process"] == {"server_cpu_s": 12.0, "jct_mean_s": 5.5}
    assert summary["multiprocess_over_in_process"] == {"server_cpu_s": 27.0 / 12.0, "jct_mean_s": 7.5 / 5.5}


def test_each_executor_is_the_one_its_server_is_asked_for():
    commands = {executor: vllm_server_command(engine_config(executor, "/models/tiny"), port=8000)
                for executor in EXECUTORS}  # fmt: skip
    for executor, backend, multiprocessing in (("in-process", "uni", "0"), ("multiprocess", "mp", "1")):
        argv = list(commands[executor].argv)
        last = len(argv) - 1 - argv[::-1].index("--distributed-executor-backend")
        assert argv[last + 1] == backend
        assert commands[executor].env["VLLM_ENABLE_V1_MULTIPROCESSING"] == multiprocessing
