"""The simulator's error bands: one table per source, the band the largest any source found."""

from __future__ import annotations

import pytest

from orchestrator.sim.error_bands import load_error_tables, load_policy_errors, write_errors


def test_a_policys_band_is_the_largest_error_any_source_found_and_each_source_keeps_its_table(tmp_path):
    path = tmp_path / "sim_error.toml"
    write_errors("calibration", {"fcfs": 0.09, "lmcache": 0.12}, path)
    write_errors("cpu_pressure", {"fcfs": 0.2, "continuum": 0.15}, path)
    assert load_policy_errors(path) == {"fcfs": 0.2, "lmcache": 0.12, "continuum": 0.15}
    write_errors("calibration", {"fcfs": 0.3}, path)  # a rewrite replaces its own table only
    assert load_error_tables(path) == {"calibration": {"fcfs": 0.3}, "cpu_pressure": {"fcfs": 0.2, "continuum": 0.15}}
    assert load_policy_errors(path) == {"fcfs": 0.3, "continuum": 0.15}


def test_an_unknown_source_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown error source 'h100'.*calibration.*cpu_pressure"):
        write_errors("h100", {"fcfs": 0.1}, tmp_path / "sim_error.toml")
    (tmp_path / "old.toml").write_text('[relative_error]\n"fcfs" = 0.1\n')
    with pytest.raises(ValueError, match=r"unknown error sources \['relative_error'\]"):
        load_policy_errors(tmp_path / "old.toml")
