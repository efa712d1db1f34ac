"""The public-figures benchmark's machinery at a small size (the shipped figures and their errors are the benchmark's
own run): every shipped figure reads, a malformed one is one line, a derived constant is recovered, a server figure's
rate keeps its limits, and a figure missed without a stated reason fails the run."""

from __future__ import annotations

import json

import pytest

from benchmarks import public_figures
from orchestrator.roofline.hardware import Calibration

SMALL = """
[[figure]]
id = "decode"
gpu = "A100"
engine = "test"
metric = "tpot_ms"
published = {decode}
input_tokens = 512
output_tokens = 16
source = "made here"

[[figure]]
id = "offline"
gpu = "H100"
engine = "test"
metric = "offline_tokens_s"
published = 1000.0
input_tokens = 512
output_tokens = 32
requests = 60
weights = "fp8"
kv_cache = "fp8"
derives = "seq_overhead_s"
source = "made here"
"""


def test_every_shipped_figure_reads_with_its_source_and_each_miss_says_why():
    figures, excluded = public_figures.load_figures()
    assert len({figure.id for figure in figures}) == len(figures) >= 8 and excluded
    assert all(figure.source for figure in figures) and all(entry.reason for entry in excluded)
    assert [figure.derives for figure in figures if figure.derives] == ["seq_overhead_s"]


def test_a_malformed_figure_is_one_line_naming_the_file_the_figure_and_the_field(tmp_path, capsys):
    path = tmp_path / "figures.toml"
    path.write_text(SMALL.format(decode=14.0).replace('source = "made here"\n', "", 1))
    assert public_figures.main(["--figures", str(path)]) == 2
    message = capsys.readouterr().err.strip()
    assert message == f"error: {path}: figure decode: source: Field required"
    path.write_text(SMALL.format(decode=14.0).replace('gpu = "A100"', 'gpu = "A200"'))
    assert public_figures.main(["--figures", str(path)]) == 2
    assert "figure decode: entry: Value error, gpu 'A200' is not a GPU type; valid: " in capsys.readouterr().err


def test_a_derived_constant_is_the_value_that_reproduces_its_figure():
    figures, _ = public_figures.load_figures_from_text(SMALL.format(decode=14.0))
    offline = next(figure for figure in figures if figure.derives)
    calibration = Calibration.load().with_values(seq_overhead_s=4e-5)
    made = offline.model_copy(update={"published": public_figures.simulated(offline, calibration)})
    derived = public_figures.derived_value(made, Calibration.load())
    assert derived == pytest.approx(4e-5, rel=0.02)


def test_a_server_figures_rate_keeps_its_percentile_limits(monkeypatch):
    monkeypatch.setattr(public_figures, "SERVER_WINDOW_S", 10.0)
    figures, _ = public_figures.load_figures_from_text(SMALL.format(decode=14.0))
    server = next(f for f in figures if f.id == "offline").model_copy(update={
        "metric": "server_tokens_s", "derives": None, "ttft_limit_ms": 500.0, "tpot_limit_ms": 30.0})
    rate = public_figures.highest_rate_within_limits(server)
    records = public_figures._run(server, list(public_figures.poisson_arrivals(rate, 10.0, seed=42)))
    assert rate > 1 and all(record.finished_at is not None for record in records)
    assert public_figures._p99([record.ttft_s for record in records]) <= 0.5
    assert public_figures._p99([public_figures._tpot_s(record) for record in records]) <= 0.03


def test_a_figure_missed_without_a_reason_fails_the_run_and_with_one_is_listed(tmp_path, capsys):
    path = tmp_path / "figures.toml"
    path.write_text(SMALL.format(decode=1.0))  # the A100 decodes nowhere near 1 ms a token
    assert public_figures.main(["--figures", str(path), "--only", "decode"]) == 1
    out = capsys.readouterr().out
    assert "| decode | A100 | test | tpot_ms | check | 1 |" in out and "- decode: NO REASON RECORDED" in out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["figures"]["decode"]["simulated"] > 10 and figures["gpu_errors"]["A100"] > 9
    path.write_text(SMALL.format(decode=1.0).replace('source = "made here"', 'known_gap = "a test"\nsource = "s"', 1))
    assert public_figures.main(["--figures", str(path), "--only", "decode"]) == 0
    assert "- decode: a test" in capsys.readouterr().out
