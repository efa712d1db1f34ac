"""The simulator's error bands: one table per source, the band the largest any source found."""

from __future__ import annotations

import pytest

from orchestrator.sim.error_bands import (
    SimErrors,
    load_error_tables,
    load_errors,
    write_errors,
    write_gpu_errors,
)


def test_a_policys_band_is_the_largest_error_any_source_found_and_each_source_keeps_its_table(tmp_path):
    path = tmp_path / "sim_error.toml"
    write_errors("calibration", {"fcfs": 0.09, "lmcache": 0.12}, path)
    write_errors("cpu_pressure", {"fcfs": 0.2, "continuum": 0.15}, path)
    assert load_errors(path).policies == {"fcfs": 0.2, "lmcache": 0.12, "continuum": 0.15}
    write_errors("calibration", {"fcfs": 0.3}, path)  # a rewrite replaces its own table only
    assert load_error_tables(path) == {"calibration": {"fcfs": 0.3}, "cpu_pressure": {"fcfs": 0.2, "continuum": 0.15}}
    assert load_errors(path).policies == {"fcfs": 0.3, "continuum": 0.15}


def test_an_unknown_source_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown error source 'h100'.*calibration.*cpu_pressure"):
        write_errors("h100", {"fcfs": 0.1}, tmp_path / "sim_error.toml")
    (tmp_path / "old.toml").write_text('[relative_error]\n"fcfs" = 0.1\n')
    with pytest.raises(ValueError, match=r"unknown error sources \['relative_error'\]"):
        load_errors(tmp_path / "old.toml")


def test_the_gpu_table_joins_the_band_and_an_unchecked_gpu_takes_the_largest(tmp_path):
    path = tmp_path / "sim_error.toml"
    write_errors("calibration", {"fcfs": 0.03, "continuum": 0.04}, path)
    write_gpu_errors({"H100": 0.12, "L40S": 0.5}, path)
    write_errors("cpu_pressure", {"fcfs": 0.02}, path)  # a policy table's rewrite keeps the GPU table
    errors = load_errors(path)
    assert errors.gpus == {"H100": 0.12, "L40S": 0.5} and errors.policies == {"fcfs": 0.03, "continuum": 0.04}
    assert errors.band_pct("H100", "fcfs", "continuum") == pytest.approx(13.0, abs=0.01)  # sqrt(3^2 + 4^2 + 12^2)
    assert errors.band_pct("B200", "fcfs", "continuum") == pytest.approx((0.03**2 + 0.04**2 + 0.5**2) ** 0.5 * 100)
    assert errors.band_pct("H100", "fcfs", "lmcache") == pytest.approx((0.03**2 + 0.04**2 + 0.12**2) ** 0.5 * 100)
    assert SimErrors({"fcfs": 0.1}).band_pct("H100", "fcfs", "fcfs") == pytest.approx(0.1 * 2**0.5 * 100)


def test_cells_predicted_one_at_a_time_widen_a_band_and_never_narrow_an_unmeasured_policys(tmp_path):
    path = tmp_path / "sim_error.toml"
    write_errors("calibration", {"fcfs": 0.09, "lmcache": 0.12}, path)
    write_errors("gpu_pressure", {"fcfs": 0.05, "lmcache": 0.16, "native-offload": 0.01}, path)
    # lmcache widens to the GPU cell's error, fcfs keeps its larger one, native-offload (measured by one cell only)
    # keeps what an unmeasured policy takes: the largest of the other sources'.
    assert load_errors(path).policies == {"fcfs": 0.09, "lmcache": 0.16, "native-offload": 0.12}
    assert load_errors(path).cell_band("H100", "lmcache") == pytest.approx(0.16)  # no GPU table: the policy's alone
