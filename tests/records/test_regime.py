"""The KV regime a cell measured, from its summary columns."""

from __future__ import annotations

import math

from orchestrator.records.regime import KvRegime, measured_regime, regime_of_row


def test_a_cell_whose_later_turns_kept_their_prefix_and_nothing_gave_way_fits():
    regime = measured_regime(prefix_kept_pct=97.0, num_preemptions=0, pin_gave_way_pct=0.0, external_prefix_cache_hits=0)
    assert regime.regime is KvRegime.FITS and regime.in_words() == "fits"


def test_each_sign_of_pressure_is_named():
    assert measured_regime(20.0).in_words() == "pressure (later turns kept 20% of their prefix)"
    assert measured_regime(95.0, num_preemptions=3).evidence == ("3 preemptions",)
    assert measured_regime(95.0, pin_gave_way_pct=12.5).evidence == ("12% of pins gave way",)
    assert measured_regime(99.0, external_prefix_cache_hits=4096).regime is KvRegime.PRESSURE


def test_a_cell_without_later_turns_has_no_measured_regime_and_a_summary_row_is_read_as_is():
    assert measured_regime(None) is None and measured_regime(math.nan) is None
    row = {"prefix_kept_pct": 40.0, "num_preemptions": math.nan, "pin_gave_way_pct": None}
    assert regime_of_row(row).evidence == ("later turns kept 40% of their prefix",)
