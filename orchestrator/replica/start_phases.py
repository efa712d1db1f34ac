"""Where a vLLM server's start went, read from its log (pure).

A start on a GPU is the process and its imports, the weights' load, torch.compile (a warm compile cache turns
it into a load of the compiled graphs), the memory profile that sizes the KV pool, CUDA-graph capture, and the
API server coming up. vLLM logs the load, the compilation and the capture by themselves, and the engine's whole
initialisation (profile, KV pool, compilation, capture, warm-up) as one figure; the rest of the wall time is
the process, its imports and the API server. A phase the log does not name is None (the CPU build logs no
weights' load, an eager start compiles and captures nothing). The log also says whether torch.compile found its
graphs in vLLM's cache (``VLLM_CACHE_ROOT``, by default under the home directory, so it outlives a server and a
run on the node): a start that loads them skips most of the compilation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The lines of vLLM 0.26 and 0.32 (the tested stacks) that carry a phase's seconds.
_LOAD = re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds")
_WEIGHTS = re.compile(r"Loading weights took ([\d.]+) seconds")
_ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
_COMPILATION = re.compile(r"\(compilation: ([\d.]+) s")
_CAPTURE = re.compile(r"Graph capturing finished in ([\d.]+) secs")
# vLLM 0.26 logs both lines of a kind; 0.32, compiling ahead of time, may log only the second.
_COMPILE_CACHE_HIT = re.compile(
    r"Directly load the compiled graph\(s\) for .* from the cache|Directly load AOT compilation"
)
_COMPILE_CACHE_MISS = re.compile(r"Compiling a graph for .* takes [\d.]+ s|saved AOT compiled function to")


@dataclass(frozen=True)
class StartSplit:
    """One server start's wall time and the phases its log names, in seconds."""

    total_s: float
    load_s: float | None  # the weights (random ones with --load-format dummy) onto the device
    engine_init_s: float | None  # profile, KV pool, compilation, capture and warm-up together
    compile_s: float | None  # torch.compile, or the load of its cached graphs
    graph_capture_s: float | None
    compile_cache: str | None = None  # "hit": graphs loaded from vLLM's cache; "miss": compiled; None: no compile

    @property
    def profile_and_warmup_s(self) -> float | None:
        """The engine's initialisation less compilation and capture: the memory profile, the KV pool, warm-up."""
        if self.engine_init_s is None:
            return None
        return max(0.0, self.engine_init_s - (self.compile_s or 0.0) - (self.graph_capture_s or 0.0))

    @property
    def process_and_api_s(self) -> float:
        """What the log does not name: the process, its imports, the API server's start."""
        return max(0.0, self.total_s - (self.load_s or 0.0) - (self.engine_init_s or 0.0))

    def phases(self) -> dict[str, float | None]:
        return {"total": self.total_s, "weights load": self.load_s, "torch.compile": self.compile_s,
                "CUDA graphs": self.graph_capture_s, "profile, KV pool, warm-up": self.profile_and_warmup_s,
                "process, imports, API": self.process_and_api_s}  # fmt: skip


def start_split(log: str, total_s: float) -> StartSplit:
    """The phases of the start that ``log`` (the server's own, from its first line) records, ``total_s`` being
    the wall time from launch to a healthy server. The first figure of each kind counts: a start logs each once."""
    return StartSplit(
        total_s=total_s,
        load_s=_first(_LOAD, log) if _LOAD.search(log) else _first(_WEIGHTS, log),
        engine_init_s=_first(_ENGINE_INIT, log),
        compile_s=_first(_COMPILATION, log),
        graph_capture_s=_first(_CAPTURE, log),
        compile_cache="miss" if _COMPILE_CACHE_MISS.search(log) else "hit" if _COMPILE_CACHE_HIT.search(log) else None,
    )


def _first(pattern: re.Pattern[str], log: str) -> float | None:
    match = pattern.search(log)
    return float(match.group(1)) if match else None
