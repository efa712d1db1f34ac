"""A one-screen terminal summary of a cell."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from orchestrator.records.summary import CellSummary


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def render_cell_summary(title: str, summary: CellSummary, console: Console | None = None) -> None:
    console = console or Console(width=max(Console().width, 110))
    console.print(f"[bold]{title}[/bold]")
    console.print(
        f"jobs {summary.num_jobs}  completed {summary.num_completed}  timeouts {summary.num_timeouts}  "
        f"errors {summary.num_errors}   JCT mean {_fmt(summary.jct_mean_s)} s  p50 {_fmt(summary.jct_p50_s)} s  "
        f"p90 {_fmt(summary.jct_p90_s)} s  p99 {_fmt(summary.jct_p99_s)} s   "
        f"dispatch lag p99 {_fmt(summary.dispatch_lag_p99_ms)} ms"
    )
    table = Table(show_edge=False, pad_edge=False)
    columns = ("turn", "requests", "target prompt", "measured", "error", "latency s", "TTFT s", "cached", "best",
               "cached/best")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for turn in summary.turns:
        error = None
        if turn.prompt_tokens_mean is not None and turn.target_prompt_tokens:
            error = (turn.prompt_tokens_mean - turn.target_prompt_tokens) / turn.target_prompt_tokens * 100
        table.add_row(
            f"T{turn.turn}",
            str(turn.num_requests),
            _fmt(turn.target_prompt_tokens, "{:.0f}"),
            _fmt(turn.prompt_tokens_mean, "{:.1f}"),
            _fmt(error, "{:+.2f}%"),
            _fmt(turn.latency_mean_s, "{:.3f}"),
            _fmt(turn.ttft_mean_s, "{:.3f}"),
            _fmt(turn.cached_fraction, "{:.1%}"),
            _fmt(turn.best_cached_fraction, "{:.1%}"),
            _fmt(turn.cached_of_best, "{:.1%}"),
        )
    console.print(table)
    if summary.t_last_over_t1:
        console.print(f"T-last/T1 latency ratio {summary.t_last_over_t1:.2f} (each job's last turn over its first)")
