"""The shared records round-trip through JSON and reject inconsistent token lists."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from lego.types import (
    NO_LOGPROB,
    CounterName,
    Generation,
    Segment,
    Task,
    Trajectory,
    logprobs_from_array,
    logprobs_to_array,
)


def test_task_accepts_swebench_json_encoded_test_lists() -> None:
    task = Task.model_validate(
        {
            "instance_id": "astropy__astropy-12907",
            "repo": "astropy/astropy",
            "base_commit": "d16bfe05",
            "problem_statement": "x",
            "patch": "diff",
            "test_patch": "diff",
            "FAIL_TO_PASS": '["tests/test_a.py::test_one"]',
            "PASS_TO_PASS": "[]",
        }
    )
    assert task.FAIL_TO_PASS == ["tests/test_a.py::test_one"] and task.PASS_TO_PASS == []
    assert Task.model_validate_json(task.model_dump_json()) == task


def test_task_rejects_unknown_fields_and_bad_lists() -> None:
    with pytest.raises(ValidationError):
        Task.model_validate({"instance_id": "a", "repo": "r", "problem_statement": "p", "patch": "", "bogus": 1})
    with pytest.raises(ValidationError, match="JSON-encoded"):
        Task.model_validate(
            {"instance_id": "a", "repo": "r", "problem_statement": "p", "patch": "", "FAIL_TO_PASS": "[oops"}
        )


def test_segment_checks_parallel_lists_and_sampled_logprobs() -> None:
    seg = Segment(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5],
        response_mask=[1, 0, 1],
        response_logprobs=[-0.5, None, -1.0],
        response_versions=[0, None, 0],
    )
    assert seg.num_sampled == 2 and seg.input_ids == [1, 2, 3, 4, 5]
    with pytest.raises(ValidationError, match="disagree in length"):
        Segment(prompt_ids=[1], response_ids=[2], response_mask=[1, 1], response_logprobs=[-1.0], response_versions=[0])
    with pytest.raises(ValidationError, match="no logprob"):
        Segment(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[None], response_versions=[0])
    unversioned = Segment.model_validate(
        {"prompt_ids": [1], "response_ids": [2], "response_mask": [1], "response_logprobs": [-1.0]}
    )
    assert unversioned.response_versions == [None]  # a record naming no versions still loads
    with pytest.raises(ValidationError, match="disagree in length"):  # but a given list must fit
        Segment(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-1.0], response_versions=[])


def test_generation_lengths_must_agree() -> None:
    with pytest.raises(ValidationError):
        Generation(token_ids=[1, 2], logprobs=[-0.1], finish_reason="stop")
    with pytest.raises(ValidationError, match="versions"):
        Generation(token_ids=[1, 2], logprobs=[-0.1, -0.2], versions=[0], finish_reason="stop")
    with pytest.raises(ValidationError, match="first token"):
        Generation(token_ids=[1, 2], logprobs=[-0.1, -0.2], versions=[1, 2], policy_version=2, finish_reason="stop")


def test_generation_versions_per_token_round_trip_and_default_to_one_version() -> None:
    """A weight swap mid-generation shows as a version step; a record with one version (vLLM's, an
    older trajectory) means every token has it; a cut keeps ids, logprobs and versions together."""
    gen = Generation(token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3], versions=[4, 4, 5], finish_reason="length")
    assert gen.policy_version == 4
    assert Generation.model_validate_json(gen.model_dump_json()) == gen
    old = Generation.model_validate(
        {"token_ids": [1, 2], "logprobs": [-0.1, -0.2], "finish_reason": "stop", "policy_version": 7}
    )
    assert old.versions == [7, 7]
    cut = gen.cut(2, "stop")
    assert (cut.token_ids, cut.logprobs, cut.versions, cut.finish_reason) == ([1, 2], [-0.1, -0.2], [4, 4], "stop")


def test_trajectory_round_trip_and_infra_flag() -> None:
    seg = Segment(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-0.25], response_versions=[3])
    traj = Trajectory(
        trajectory_id="t",
        session_id="s",
        task_id="x",
        harness="lego-agent",
        segments=[seg],
        termination="env_error",
        cause="infrastructure",
        cause_detail="sandbox creation failed before the agent acted",
        reward=None,
        guard_flags={"test_tamper": False},
    )
    back = Trajectory.model_validate_json(traj.model_dump_json())
    assert back == traj
    assert back.is_infra_failure and back.num_sampled_tokens == 1
    # An env_error the agent caused is the policy's: scored, not masked.
    assert not back.model_copy(update={"cause": "policy"}).is_infra_failure


def test_counters_are_named_ones_and_serialize_as_plain_json_keys() -> None:
    traj = Trajectory(trajectory_id="t", session_id="s", counters={"calls": 2, "engine_time_s": 0.5})
    assert '"counters":{"calls":2.0,"engine_time_s":0.5}' in traj.model_dump_json()
    assert Trajectory.model_validate_json(traj.model_dump_json()) == traj
    with pytest.raises(ValidationError, match="counters"):
        Trajectory(trajectory_id="t", session_id="s", counters={"calz": 1})


def test_every_counter_the_recorder_keeps_is_a_counter_name(chat_format) -> None:
    from typing import get_args

    from lego.proxies.recorder import SessionRecorder

    assert set(SessionRecorder(chat_format).summary_counters()) <= set(get_args(CounterName))


def test_no_logprob_is_none_in_a_list_and_nan_in_an_array_never_a_number() -> None:
    listed = [-0.5, None, -1.25]
    arrayed = logprobs_to_array(listed)
    assert arrayed[0] == -0.5 and math.isnan(arrayed[1]) and arrayed[2] == -1.25
    assert logprobs_from_array(arrayed) == listed
    with pytest.raises(ValidationError, match=r"response_logprobs\[1\] is NaN"):
        Segment(prompt_ids=[1], response_ids=[2, 3], response_mask=[1, 0], response_logprobs=[-0.1, NO_LOGPROB],
                response_versions=[0, None])  # fmt: skip
