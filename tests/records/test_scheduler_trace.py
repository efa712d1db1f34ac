"""The scheduler trace's lines: byte for byte what the plugin and the simulator have always written."""

import json

from orchestrator.records.scheduler_trace import (
    Admit,
    Finish,
    FinishAction,
    Step,
    Unpin,
    UnpinReason,
    attention_pairs,
    json_line,
    merged_traces,
    pin_releases,
    read_trace,
    trace_bytes,
    trace_line,
)

STEP = Step(
    t=12.5, step=3, running=2, waiting=1, scheduled=2, prefill_tokens=100, decode_tokens=1, context_tokens=1101,
    attention_pairs=55050.0, free_blocks=900, pinned_blocks=40, preempted=0,
)  # fmt: skip


def test_a_step_is_one_compact_json_line_with_kind_first_and_the_fields_in_order():
    assert trace_line(STEP) == (
        '{"kind":"step","t":12.5,"step":3,"running":2,"waiting":1,"scheduled":2,"prefill_tokens":100,'
        '"decode_tokens":1,"context_tokens":1101,"attention_pairs":55050.0,"free_blocks":900,"pinned_blocks":40,'
        '"preempted":0}\n'
    )


def test_an_admission_of_a_request_from_another_client_writes_null_job_and_turn():
    admit = Admit(t=1.25, request_id="r7", job_id=None, turn=None, prompt_tokens=80, cached_tokens=64, free_blocks=10)
    assert trace_line(admit) == (
        '{"kind":"admit","t":1.25,"request_id":"r7","job_id":null,"turn":null,"prompt_tokens":80,"cached_tokens":64,'
        '"free_blocks":10}\n'
    )


def test_a_finish_writes_its_action_as_the_plain_word():
    finish = Finish(t=2.0, request_id="s42-j00001-t3", job_id="s42-j00001", turn=3, is_last=False,
                    action=FinishAction.PIN, free_blocks=5)  # fmt: skip
    assert trace_line(finish) == (
        '{"kind":"finish","t":2.0,"request_id":"s42-j00001-t3","job_id":"s42-j00001","turn":3,"is_last":false,'
        '"action":"pin","free_blocks":5}\n'
    )
    assert finish.action.is_pin and not FinishAction.FREE.is_pin


def test_an_unpin_writes_its_reason_and_how_long_the_pin_was_held():
    unpin = Unpin(t=3.5, job_id="s42-j00001", reason="ttl", num_blocks=12, held_s=2.25, free_blocks=17)
    assert trace_line(unpin) == (
        '{"kind":"unpin","t":3.5,"job_id":"s42-j00001","reason":"ttl","num_blocks":12,"held_s":2.25,"free_blocks":17}\n'
    )


def test_a_trace_is_its_lines_in_order_and_other_kinds_share_the_format():
    unpin = Unpin(t=3.5, job_id="j", reason="abort", num_blocks=1, held_s=0.5, free_blocks=2)
    assert trace_bytes([STEP, unpin]) == (trace_line(STEP) + trace_line(unpin)).encode()
    assert trace_bytes([]) == b""
    probe = {"kind": "probe_overlap", "t": 1.0, "requests": 2}
    assert json_line(probe) == '{"kind":"probe_overlap","t":1.0,"requests":2}\n'


def test_attention_pairs_count_each_new_tokens_keys_up_to_and_including_itself():
    assert attention_pairs(3, 2) == 3 + 4 + 5  # a three-token chunk after two computed tokens
    assert attention_pairs(1, 100) == 101  # a decode token
    assert attention_pairs(0, 50) == 0


def test_a_written_trace_reads_back_as_the_same_events_and_other_kinds_are_left_out():
    events = [
        Step(t=1.0, step=1, running=2, waiting=0, scheduled=2, prefill_tokens=10, decode_tokens=1, context_tokens=11,
             attention_pairs=66.0, free_blocks=5, pinned_blocks=0, preempted=0),
        Finish(t=1.5, request_id="j-t1", job_id="j", turn=1, is_last=False, action=FinishAction.PIN, free_blocks=5),
        Unpin(t=2.0, job_id="j", reason="next_turn", num_blocks=3, held_s=0.5, free_blocks=8),
    ]  # fmt: skip
    probe = json_line({"kind": "probe_idle", "t": 3.0}).encode()
    assert read_trace(trace_bytes(events) + probe) == events


def test_each_pin_is_keyed_by_the_turn_that_made_it_with_the_reason_it_ended():
    def finish(job, turn, action=FinishAction.PIN):
        return Finish(t=turn, request_id=f"{job}-t{turn}", job_id=job, turn=turn, is_last=False, action=action,
                      free_blocks=0)  # fmt: skip

    def unpin(job, reason):
        return Unpin(t=0.0, job_id=job, reason=reason, num_blocks=1, held_s=0.1, free_blocks=0)

    events = [
        finish("a", 1), finish("b", 1), unpin("a", "next_turn"), finish("a", 2), unpin("b", "ttl"),
        unpin("a", "pressure"), finish("c", 1, FinishAction.FREE), unpin("c", "abort"), finish("a", 3), STEP,
    ]  # fmt: skip
    assert pin_releases(events) == {("a", 1): "next_turn", ("b", 1): "ttl", ("a", 2): "pressure"}


def test_replicas_traces_merge_in_time_order_each_line_tagged_with_its_replica():
    first = trace_bytes([STEP, Finish(t=14.0, request_id="a-t1", job_id="a", turn=1, is_last=False,
                                      action=FinishAction.PIN, free_blocks=5)])  # fmt: skip
    second = trace_bytes([Unpin(t=13.0, job_id="b", reason=UnpinReason.TTL, num_blocks=3, held_s=0.5,
                                free_blocks=8),
                          Admit(t=14.0, request_id="b-t2", job_id="b", turn=2, prompt_tokens=90, cached_tokens=64,
                                free_blocks=6)])  # fmt: skip
    merged = merged_traces([first, second, b""])
    lines = [json.loads(line) for line in merged.splitlines()]
    assert [(line["t"], line["replica"]) for line in lines] == [(12.5, 0), (13.0, 1), (14.0, 0), (14.0, 1)]
    assert read_trace(merged) == [STEP, *read_trace(second)[:1], *read_trace(first)[1:], *read_trace(second)[1:]]
