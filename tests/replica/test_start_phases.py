"""The phases of a vLLM server's start, read from its log: vLLM's own lines, as its GPU and CPU builds print them."""

import pytest

from orchestrator.replica.start_phases import start_split

# The lines vLLM 0.26 logs on a GPU start (their format strings: v1/worker/gpu_model_runner.py's "Model loading
# took %s GiB memory and %.6f seconds" and "Graph capturing finished in %.0f secs, took %.2f GiB", v1/engine/core.py's
# "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)").
GPU_START = """\
(EngineCore pid=311) INFO 11-26 10:00:04 [gpu_model_runner.py:5348] Model loading took 14.99 GiB memory and 4.512345 seconds
(EngineCore pid=311) INFO 11-26 10:00:31 [backends.py:612] Compiling a graph for compile range (1, 8192) takes 21.05 s
(EngineCore pid=311) INFO 11-26 10:00:48 [gpu_model_runner.py:6845] Graph capturing finished in 12 secs, took 0.52 GiB
(EngineCore pid=311) INFO 11-26 10:00:49 [core.py:331] init engine (profile, create kv cache, warmup model) took 48.20 s (compilation: 25.31 s)
"""
CPU_START = "INFO 11-26 10:00:09 [core.py:348] init engine (profile, create kv cache, warmup model) took 3.10 s\n"


def test_a_gpu_start_splits_into_load_compilation_capture_profile_and_the_rest():
    split = start_split(GPU_START, total_s=90.0)
    assert (split.load_s, split.compile_s, split.graph_capture_s, split.engine_init_s) == (4.512345, 25.31, 12.0, 48.2)
    assert split.profile_and_warmup_s == pytest.approx(48.2 - 25.31 - 12.0)
    assert split.process_and_api_s == pytest.approx(90.0 - 4.512345 - 48.2)
    assert sum(value for phase, value in split.phases().items() if phase != "total") == pytest.approx(90.0)


def test_an_eager_cpu_start_names_only_what_its_log_has():
    split = start_split(CPU_START, total_s=30.0)
    assert (split.load_s, split.compile_s, split.graph_capture_s) == (None, None, None)
    assert split.profile_and_warmup_s == pytest.approx(3.1) and split.process_and_api_s == pytest.approx(26.9)
    assert start_split("", total_s=5.0).phases()["process, imports, API"] == 5.0
    assert split.compile_cache is None  # an eager start compiles nothing


# vLLM 0.26 on an H100 (docs/gpu-runs/2026-11-27-H100, the call-1 servers' logs): a configuration's first start on
# the machine compiles and saves its graphs; the next start of it finds them.
COMPILED = """\
(EngineCore pid=808) INFO 11-27 04:49:34 [backends.py:1094] Using cache directory: /root/.cache/vllm/torch_compile_cache/b1785fb534/rank_0_0/backbone for vLLM's torch.compile
(EngineCore pid=808) INFO 11-27 04:49:43 [backends.py:393] Compiling a graph for compile range (1, 8192) takes 8.45 s
(EngineCore pid=808) INFO 11-27 04:49:48 [monitor.py:53] torch.compile took 19.86 s in total
"""
LOADED = """\
(EngineCore pid=1196) INFO 11-27 04:51:27 [backends.py:1094] Using cache directory: /root/.cache/vllm/torch_compile_cache/b1785fb534/rank_0_0/backbone for vLLM's torch.compile
(EngineCore pid=1196) INFO 11-27 04:51:28 [backends.py:292] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 1.082 s
(EngineCore pid=1196) INFO 11-27 04:51:28 [monitor.py:53] torch.compile took 3.55 s in total
"""


def test_a_start_says_whether_torch_compile_found_its_graphs_in_vllms_cache():
    assert start_split(COMPILED, total_s=90.0).compile_cache == "miss"
    assert start_split(LOADED, total_s=50.0).compile_cache == "hit"
    assert start_split(GPU_START, total_s=90.0).compile_cache == "miss"
    # Compiled ahead of time, as vLLM 0.32 may log it alone (its format strings, compilation/decorators.py).
    loaded, saved = "Directly load AOT compilation from path /c/m\n", "saved AOT compiled function to /c/m\n"
    assert (start_split(loaded, 9.0).compile_cache, start_split(saved, 9.0).compile_cache) == ("hit", "miss")
