"""The report's figures, as PNG bytes (matplotlib, no display needed)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from orchestrator.records.verdict import Verdict, VerdictKind  # noqa: E402


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def jct_vs_jps(per_policy: pd.DataFrame, policies: list[str], title: str) -> bytes:
    """Mean job time against jobs per second, log scale, one line per policy with its interval as error bars
    (``per_policy``: rows of ``analysis.verdicts`` statistics; a DRAM budget per line where there are several)."""
    figure, axes = plt.subplots(figsize=(6.4, 4))
    several_budgets = per_policy.dram_gb.nunique() > 1
    for policy in policies:
        for dram_gb, rows in per_policy[per_policy.policy == policy].groupby("dram_gb"):
            rows = rows.sort_values("jps")
            errors = [rows.jct_mean_s - rows.jct_lo_s, rows.jct_hi_s - rows.jct_mean_s]
            label = f"{policy} ({dram_gb:g} GiB)" if several_budgets else policy
            axes.errorbar(rows.jps, rows.jct_mean_s, yerr=errors, marker="o", capsize=3, label=label)
    axes.set_yscale("log")
    axes.set_xlabel("jobs per second")
    axes.set_ylabel("mean job time (s, log)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    return _png(figure)


def verdict_map(found: list[Verdict], rests_on: Mapping[tuple, str] | None = None) -> bytes:
    """Per GPU, a grid of load (x) by DRAM budget (y): each square the winner's name and margin over the
    closest rival, shaded by the margin's lower bound; ties grey, named as ties; trade-offs hatched, naming
    the faster policy (its margin over the leader read as a win's) and the jobs it lost. With ``rests_on`` (by
    gpu, DRAM budget, load and replicas), each square also says whether its verdict is measured, predicted or
    both."""
    gpus = sorted({verdict.gpu for verdict in found})
    figure, panels = plt.subplots(len(gpus), 1, figsize=(7.5, 1.4 + 1.1 * len(gpus) * 1.2), squeeze=False)
    policies = sorted({verdict.leader for verdict in found if verdict.significant})
    colours = dict(zip(policies, plt.cm.tab10.colors))
    for panel, gpu in zip(panels[:, 0], gpus):
        of_gpu = [verdict for verdict in found if verdict.gpu == gpu]
        loads, budgets = sorted({v.jps for v in of_gpu}), sorted({v.dram_gb for v in of_gpu})
        for verdict in of_gpu:
            corner = (loads.index(verdict.jps), budgets.index(verdict.dram_gb))
            text, patch = _verdict_square(verdict, colours)
            if rests_on is not None:
                text += f"\n({rests_on.get((verdict.gpu, verdict.dram_gb, verdict.jps, verdict.replicas), '?')})"
            panel.add_patch(plt.Rectangle(corner, 1, 1, **patch))
            panel.text(corner[0] + 0.5, corner[1] + 0.5, text, ha="center", va="center", fontsize=7)
        panel.set_xlim(0, len(loads))
        panel.set_ylim(0, len(budgets))
        panel.set_xticks([i + 0.5 for i in range(len(loads))], [f"{jps:g}" for jps in loads])
        panel.set_yticks([i + 0.5 for i in range(len(budgets))], [f"{gib:g} GiB" for gib in budgets])
        panel.set_title(f"{gpu} ({', '.join(sorted({v.engine for v in of_gpu}))})", fontsize=9)
        panel.set_xlabel("jobs per second", fontsize=8)
    figure.tight_layout()
    return _png(figure)


def _verdict_square(verdict: Verdict, colours: dict[str, tuple]) -> tuple[str, dict]:
    """A verdict's text and its square's look."""
    if verdict.significant:
        shade = 0.35 + 0.65 * min(max(verdict.margin_lo_pct, 0.0), 50.0) / 50.0
        return f"{verdict.leader}\n+{verdict.margin_pct:.0f}%", {"color": colours[verdict.leader], "alpha": shade}
    if verdict.kind is VerdictKind.TRADE_OFF:
        text = f"trade-off\n{verdict.faster} +{verdict.faster_by_pct:.0f}%\nlost {verdict.jobs_lost}/{verdict.num_jobs}"
        return text, {"facecolor": "0.95", "edgecolor": "0.6", "hatch": "//"}
    if verdict.kind is VerdictKind.TIE:
        return "tie\n" + "\n".join(verdict.tied_with[:3]), {"color": "0.85"}
    return "undecided", {"color": "0.95"}


def per_turn_curves(latency: pd.DataFrame, title: str) -> bytes:
    """Mean latency by turn number, one panel per load level, one line per policy."""
    turns = [column for column in latency.columns if column.startswith("T") and column[1:].isdigit()]

    def draw(panel, row: dict) -> None:
        panel.plot([int(turn[1:]) for turn in turns], [row[turn] for turn in turns], marker=".", label=row["policy"])

    return _panels_per_load(latency, draw, "mean latency (s)", title)


def cached_curves(cached: pd.DataFrame, title: str) -> bytes:
    """Cached fraction per turn (solid) against the theoretical best (dotted), per load level."""

    def draw(panel, row: dict) -> None:
        turns = sorted(int(key.removeprefix("cached_T")) for key in row if key.startswith("cached_T"))
        line = panel.plot(turns, [row[f"cached_T{t}"] for t in turns], marker=".", label=row["policy"])[0]
        panel.plot(turns, [row[f"best_T{t}"] for t in turns], linestyle=":", color=line.get_color())
        panel.set_ylim(0, 1.05)

    return _panels_per_load(cached, draw, "cached / prompt tokens", title)


def pin_outcomes(pins: pd.DataFrame, title: str) -> bytes:
    """One stacked bar per policy and load: the shares of its pins carried, expired, given way and abandoned."""
    labels = {"pin_carried_pct": "carried to the next turn", "pin_expired_pct": "TTL expired before it",
              "pin_gave_way_pct": "gave way to other work", "pin_abandoned_pct": "job never came back"}  # fmt: skip
    budgets = "dram_gb" in pins and pins.dram_gb.nunique() > 1
    names = [f"{row.policy}\n{row.jps:g} JPS" + (f" {row.dram_gb:g} GiB" if budgets else "")
             for row in pins.itertuples()]
    figure, axes = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 2), 3.6))
    bottom = pd.Series(0.0, index=pins.index)
    for column, label in labels.items():
        axes.bar(names, pins[column].fillna(0), bottom=bottom, label=label)
        bottom += pins[column].fillna(0)
    axes.set_ylabel("% of pins")
    axes.set_ylim(0, 100)
    axes.set_title(title)
    axes.legend(fontsize=8, loc="lower right")
    return _png(figure)


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


def step_timeline(bins: pd.DataFrame, title: str) -> bytes:
    """One cell's engine steps over time, binned (``analysis.timeline.step_bins``), a line per replica: mean batch
    size, most requests waiting, fewest free and most pinned KV blocks per bin."""
    figure, panels = plt.subplots(4, 1, figsize=(7, 6), sharex=True)
    replicas = sorted(bins.replica.unique())
    for panel, column, label in zip(
        panels,
        ("running", "waiting", "free_blocks", "pinned_blocks"),
        ("mean batch size", "most waiting", "fewest free blocks", "most pinned blocks"),
    ):
        for replica in replicas:
            rows = bins[bins.replica == replica]
            panel.plot(rows.seconds, rows[column], linewidth=0.8, label=f"replica {replica}")
        panel.set_ylabel(label, fontsize=8)
        panel.grid(True, alpha=0.3)
    if len(replicas) > 1:
        panels[0].legend(fontsize=6, ncol=4, loc="upper right")
    panels[-1].set_xlabel("seconds since the cell's first event")
    panels[0].set_title(title)
    return _png(figure)


def policy_router(routed: pd.DataFrame, title: str) -> bytes:
    """Mean job time per KV policy (groups) and router (bars), one panel per load (``routed``: rows of
    ``tables.policy_router``)."""
    routers = sorted(column.split(":")[0] for column in routed.columns if column.endswith(": jct_mean_s"))
    loads = sorted(routed.jps.unique())
    figure, panels = plt.subplots(1, len(loads), figsize=(4.2 * len(loads), 3.6), squeeze=False, sharey=True)
    for panel, jps in zip(panels[0], loads):
        rows = routed[routed.jps == jps].groupby("kv_policy")[[f"{router}: jct_mean_s" for router in routers]].mean()
        width = 0.8 / len(routers)
        for offset, router in enumerate(routers):
            positions = [index + offset * width for index in range(len(rows))]
            panel.bar(positions, rows[f"{router}: jct_mean_s"], width, label=router)
        panel.set_xticks([index + 0.4 - width / 2 for index in range(len(rows))], rows.index)
        panel.set_title(f"{jps:g} jobs per second")
        panel.grid(True, axis="y", alpha=0.3)
    panels[0][0].set_ylabel("mean job time (s)")
    panels[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle(title)
    return _png(figure)
