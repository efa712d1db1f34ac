"""The server-start benchmark's machinery, without vLLM: each start's phases summarized as medians per launcher, and
its checks held only where every start came up with an empty prefix cache and the same answers (the real starts are
the benchmark's own run, docs/measured.md)."""

from __future__ import annotations

from benchmarks.server_starts import ALL_PHASES, summarize


def starts(*healthy_s: float) -> list[dict[str, float]]:
    return [{phase: value * (index + 1) / len(ALL_PHASES) for index, phase in enumerate(ALL_PHASES)}
            for value in healthy_s]  # fmt: skip


def check(hits: int, text: str) -> dict:
    return {"prefix_cache_at_start": {"vllm:prefix_cache_queries_total": 0, "vllm:prefix_cache_hits_total": hits},
            "answers": [[text, 45, 16]]}  # fmt: skip


def test_the_medians_are_per_launcher_and_phase_and_the_checks_hold_only_when_every_start_holds_them():
    results = {"process": {"starts": starts(30, 40, 38), "checks": [check(0, "a")]},
               "forked": {"starts": starts(4, 3), "checks": [check(0, "a")], "launcher_start_s": 11.0}}  # fmt: skip
    summary = summarize(results)
    assert summary["medians"]["process"]["healthy"] == 38 and summary["medians"]["forked"]["healthy"] == 3.5
    assert summary["launcher_start_s"] == 11.0 and summary["cache_empty_at_start"] and summary["answers_equal"]
    results["forked"]["checks"].append(check(12, "b"))  # a start with a warm cache, and another answer
    summary = summarize(results)
    assert not summary["cache_empty_at_start"] and not summary["answers_equal"]
