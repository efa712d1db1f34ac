"""The report's figures, as PNG bytes (matplotlib, no display needed)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def jct_vs_jps(table: pd.DataFrame, policies: list[str], title: str) -> bytes:
    """Mean JCT against jobs per second, log scale, one line per policy (missing cells are gaps)."""
    figure, axes = plt.subplots(figsize=(6.4, 4))
    for policy in policies:
        if policy in table:
            axes.plot(table.jps, table[policy], marker="o", label=policy)
    axes.set_yscale("log")
    axes.set_xlabel("jobs per second")
    axes.set_ylabel("mean JCT (s, log)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    return _png(figure)


def per_turn_curves(latency: pd.DataFrame, title: str) -> bytes:
    """Latency of turns 1..8, one panel per load level, one line per policy."""
    turns = [column for column in latency.columns if column.startswith("T") and column[1:].isdigit()]

    def draw(panel, row: dict) -> None:
        panel.plot(range(1, len(turns) + 1), [row[turn] for turn in turns], marker=".", label=row["policy"])

    return _panels_per_load(latency, draw, "mean latency (s)", title)


def cached_curves(cached: pd.DataFrame, title: str) -> bytes:
    """Cached fraction per turn (solid) against the theoretical best (dotted), per load level."""

    def draw(panel, row: dict) -> None:
        turns = sorted(int(key.removeprefix("cached_T")) for key in row if key.startswith("cached_T"))
        line = panel.plot(turns, [row[f"cached_T{t}"] for t in turns], marker=".", label=row["policy"])[0]
        panel.plot(turns, [row[f"best_T{t}"] for t in turns], linestyle=":", color=line.get_color())
        panel.set_ylim(0, 1.05)

    return _panels_per_load(cached, draw, "cached / prompt tokens", title)


def _panels_per_load(frame: pd.DataFrame, draw, ylabel: str, title: str) -> bytes:
    """One panel per load level (``jps``); ``draw(panel, row)`` adds each row's lines against the turn."""
    loads = sorted(frame.jps.unique())
    figure, panels = plt.subplots(1, len(loads), figsize=(3.2 * len(loads), 3.2), sharey=True, squeeze=False)
    for panel, jps in zip(panels[0], loads):
        for row in frame[frame.jps == jps].to_dict("records"):
            draw(panel, row)
        panel.set_title(f"{jps:g} JPS")
        panel.set_xlabel("turn")
        panel.grid(True, alpha=0.3)
    panels[0][0].set_ylabel(ylabel)
    panels[0][0].legend(fontsize=8)
    figure.suptitle(title, y=1.04)
    return _png(figure)


def step_timeline(trace: pd.DataFrame, title: str) -> bytes:
    """One cell's engine steps over time: batch size, waiting requests, free and pinned KV blocks."""
    steps = trace[trace.kind == "step"]
    seconds = steps.t - steps.t.min()
    figure, panels = plt.subplots(4, 1, figsize=(7, 6), sharex=True)
    for panel, column, label in zip(
        panels,
        ("running", "waiting", "free_blocks", "pinned_blocks"),
        ("batch size", "waiting", "free blocks", "pinned blocks"),
    ):
        panel.plot(seconds, steps[column], linewidth=0.8)
        panel.set_ylabel(label, fontsize=8)
        panel.grid(True, alpha=0.3)
    panels[-1].set_xlabel("seconds since the cell's first step")
    panels[0].set_title(title)
    return _png(figure)
