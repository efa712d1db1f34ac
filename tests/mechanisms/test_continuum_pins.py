from __future__ import annotations

import pytest

from orchestrator.mechanisms.continuum.config import CONFIG_ENV, ContinuumConfig, TtlMode
from orchestrator.mechanisms.continuum.pins import PinTable


def test_fixed_ttl_expiry_takes_only_the_expired_pins():
    table = PinTable(ContinuumConfig(ttl_s=2.0))
    table.pin("a", 0, ["a1", "a2"], now=10.0)
    table.pin("b", 1, ["b1"], now=11.0)
    assert table.num_pinned_blocks == 3
    assert [pin.job_id for pin in table.take_expired(now=12.5)] == ["a"]
    assert "a" not in table and "b" in table
    assert table.take_expired(now=12.9) == [] and [p.job_id for p in table.take_expired(13.0)] == ["b"]


def test_pressure_takes_the_youngest_job_first_and_never_the_excluded_one():
    table = PinTable(ContinuumConfig())
    for index, job in enumerate("abc"):
        table.pin(job, index, [job], now=0.0)
    assert table.take_victim(exclude_job_id="c").job_id == "b"
    assert table.take_victim().job_id == "c"
    assert table.take_victim(exclude_job_id="a") is None
    assert len(table) == 1


def test_a_waiting_request_may_only_take_pins_of_younger_jobs():
    table = PinTable(ContinuumConfig())
    for index, job in enumerate("abc"):
        table.pin(job, index, [job], now=0.0)
    assert table.take_victim(younger_than=2) is None  # the newest job evicts nobody
    assert table.take_victim(younger_than=0).job_id == "c"
    assert table.take_victim(younger_than=0).job_id == "b"
    assert table.take_victim(younger_than=0) is None


def test_the_latest_pin_is_the_most_recently_pinned_whatever_the_jobs_age():
    table = PinTable(ContinuumConfig())
    assert table.take_latest() is None
    for index, (job, pinned_at) in enumerate((("a", 5.0), ("b", 9.0), ("c", 1.0))):
        table.pin(job, index, [job], now=pinned_at)
    assert [table.take_latest().job_id for _ in range(3)] == ["b", "a", "c"] and len(table) == 0


def test_an_expired_pin_holds_while_its_jobs_next_turn_waits_when_configured():
    for hold, expired in ((True, ["b"]), (False, ["a", "b"])):
        table = PinTable(ContinuumConfig(ttl_s=1.0, hold_while_waiting=hold))
        table.pin("a", 0, ["a"], now=0.0)
        table.pin("b", 1, ["b"], now=0.0)
        assert [pin.job_id for pin in table.take_expired(now=5.0, waiting_jobs=["a"])] == expired


def test_repinning_a_job_hands_back_its_older_pin():
    table = PinTable(ContinuumConfig())
    table.pin("a", 0, ["old"], now=0.0)
    replaced = table.pin("a", 0, ["new"], now=1.0)
    assert [pin.blocks for pin in replaced] == [["old"]]
    assert table.num_pinned_blocks == 1


def test_adaptive_ttl_follows_the_jobs_own_gaps_then_the_overall_median():
    table = PinTable(ContinuumConfig(ttl_mode=TtlMode.ADAPTIVE, ttl_s=2.0, adaptive_factor=1.5, adaptive_max_s=10))
    assert table.ttl_for("a") == 2.0  # nothing seen yet
    table.pin("a", 0, [], now=0.0)
    table.on_turn_arrived("a", arrived_at=0.8)
    table.pin("a", 0, [], now=1.0)
    table.on_turn_arrived("a", arrived_at=1.4)
    assert table.ttl_for("a") == pytest.approx(1.5 * 0.8)
    assert table.ttl_for("new-job") == pytest.approx(1.5 * 0.6)  # median of 0.8 and 0.4
    table.pin("slow", 1, [], now=0.0)
    table.on_turn_arrived("slow", arrived_at=30.0)
    assert table.ttl_for("slow") == 10  # capped


def test_reset_empties_the_table_and_forgets_what_it_learned():
    table = PinTable(ContinuumConfig(ttl_mode=TtlMode.ADAPTIVE, ttl_s=2.0, adaptive_factor=1.0))
    table.pin("a", 0, [1], now=0.0)
    table.on_turn_arrived("a", arrived_at=5.0)
    table.pin("b", 1, [2], now=0.0)
    table.on_job_finished(40)
    assert table.ttl_for("a") == 5.0 and table.reserved_blocks() > 0
    assert sorted(pin.job_id for pin in table.reset()) == ["a", "b"] and len(table) == 0
    # The next cell's jobs reuse these ids: nothing of the last cell may shape their TTL or reserve.
    assert table.ttl_for("a") == 2.0 and table.reserved_blocks() == 0


def test_config_round_trips_through_the_environment_and_rejects_unknown_keys(monkeypatch):
    config = ContinuumConfig(ttl_s=3.5, ttl_mode=TtlMode.ADAPTIVE, pinned_first=False)
    monkeypatch.setenv(CONFIG_ENV, config.to_env()[CONFIG_ENV])
    assert ContinuumConfig.from_env() == config
    monkeypatch.setenv(CONFIG_ENV, '{"ttl": 3}')
    with pytest.raises(ValueError, match="unknown keys \\['ttl'\\]"):
        ContinuumConfig.from_env()


def test_the_reserve_covers_pinned_jobs_growth_to_a_finished_jobs_size():
    table = PinTable(ContinuumConfig())
    table.pin("a", 0, [0] * 10, now=0.0)
    table.pin("b", 1, [0] * 30, now=0.0)
    assert table.reserved_blocks() == 0  # nothing finished yet: nothing to go on
    table.on_job_finished(40)
    assert table.reserved_blocks() == (40 - 10) + (40 - 30)
    table.on_job_finished(50)
    assert table.reserved_blocks() == round((41 - 10) + (41 - 30))  # moving average moved 10% toward 50
    assert PinTable(ContinuumConfig(reserve_for_pinned=False)).reserved_blocks() == 0
