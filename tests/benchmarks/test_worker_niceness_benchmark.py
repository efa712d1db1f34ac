"""The niceness benchmark's machinery on a simulated sweep of its pressure cells standing in for the measured one
(each measured configuration is two real CPU cells beside busy processes): the row of each cell, read from its
records and trace."""

from __future__ import annotations

from benchmarks.worker_niceness import RELEASES, cell_rows, pressure_spec
from orchestrator.cell.spec import EngineKind
from tests.sim.test_profile import KNOWN
from tests.simulated import simulated_sweep


def test_each_cell_gets_its_kept_prefix_share_and_how_its_pins_ended(tmp_path):
    spec = pressure_spec().model_copy(update={"engine": EngineKind.SIM, "cpu_profile": KNOWN})
    rows = {row["policy"]: row for row in cell_rows(simulated_sweep(spec, tmp_path))}
    assert sorted(rows) == ["continuum", "fcfs"] and {row["jps"] for row in rows.values()} == set(spec.jps)
    fcfs, continuum = rows["fcfs"], rows["continuum"]
    assert fcfs["server_niceness"] is None  # a simulated cell starts no server
    assert all(fcfs[f"pins_{reason}"] == 0 for reason in RELEASES)
    # Under pressure: FCFS's LRU cache loses most of the prefix, Continuum's pins keep most of it, and where a
    # pin gave way it says so.
    assert fcfs["kept"] < 0.5 < continuum["kept"] <= 1.0
    assert continuum["pins_next_turn"] > continuum["pins_pressure"] > 0
    assert continuum["jct_mean_s"] > 0
