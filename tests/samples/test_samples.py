"""Samples from a `Job`: branches, token ids through the proxy, advantages in a group."""

from __future__ import annotations

from typing import Any

from notes_env import NOTES, compacting_agent, count, strict

from proctor.engine import Job, run_taskset
from proctor.proxy import InterceptionProxy
from proctor.samples import Sample, samples_from_job


async def run_group(proxy: InterceptionProxy, params: dict[str, Any] | None = None) -> Job:
    return await run_taskset(
        [count(n=NOTES)], compacting_agent(params), proxy=proxy, group=4, max_concurrent=4
    )


async def test_a_compaction_splits_each_rollout_into_two_branches(
    proxy: InterceptionProxy,
) -> None:
    job = await run_group(proxy)
    assert [r.error for r in job.runs] == [None] * 4
    samples = list(samples_from_job(job))
    assert len(samples) == 8
    for run in job.runs:
        first, second = [s for s in samples if s.rollout_id == run.trace_id]
        assert (first.branch, second.branch) == (0, 1)
        assert first.turns + second.turns == list(range(1, NOTES + 2))  # every turn once
        assert first.prompt == [{"role": "user", "content": run.prompt}]
        assert second.prompt[0] == first.prompt[0]
        assert "[checkpoint]" in str(second.prompt[1]["content"])  # the compacted history
        assert second.completion[-1]["content"] == run.answer
        assert first.completion[-1]["tool_calls"]  # cut off mid-conversation
        assert first.tools and first.tools[0]["function"]["name"] == "note"
        assert {s.task for s in (first, second)} == {run.slug}


async def test_a_group_of_four_gets_reward_minus_the_group_mean(
    proxy: InterceptionProxy,
) -> None:
    job = await run_group(proxy)
    samples = list(samples_from_job(job))
    assert sorted(r.reward or 0.0 for r in job.runs) == [0.0, 0.0, 1.0, 1.0]
    assert len({s.group_id for s in samples}) == 1
    for s in samples:
        assert s.advantage == (0.5 if s.reward == 1.0 else -0.5)


async def test_token_ids_and_logprobs_come_through_the_proxy(proxy: InterceptionProxy) -> None:
    job = await run_group(proxy)
    for run in job.runs:
        assert run.proxy_session is not None
        turns = {t["turn"]: t["tokens"] for t in run.proxy_session.turns}
        for s in samples_from_job(job):
            if s.rollout_id == run.trace_id:
                check_tokens(s, [turns[n] for n in s.turns])


def check_tokens(sample: Sample, turns: list[dict[str, Any]]) -> None:
    """The sample's ids are the last turn's context and completion; generated tokens
    (mask 1) are each turn's, with its logprobs; the rest are the environment's."""
    ids, mask, logprobs = (
        sample.completion_token_ids,
        sample.completion_mask,
        sample.completion_logprobs,
    )
    prompt = sample.prompt_token_ids
    assert prompt == turns[0]["prompt_token_ids"]
    assert prompt is not None and ids is not None and mask is not None and logprobs is not None
    assert len(ids) == len(mask) == len(logprobs)
    last = turns[-1]
    assert prompt + ids == last["prompt_token_ids"] + last["completion_token_ids"]
    generated = [i for i, m in zip(ids, mask, strict=True) if m]
    assert generated == [i for t in turns for i in t["completion_token_ids"]]
    assert [lp for lp, m in zip(logprobs, mask, strict=True) if m] == [
        lp for t in turns for lp in t["logprobs"]
    ]
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    assert (0 in mask) == (len(turns) > 1)  # tool results sit between turns


async def test_without_token_ids_a_sample_has_its_messages_only(
    proxy: InterceptionProxy,
) -> None:
    job = await run_group(proxy, params={})
    samples = list(samples_from_job(job))
    assert len(samples) == 8
    for s in samples:
        assert s.prompt and s.completion
        assert s.prompt_token_ids is s.completion_token_ids is s.completion_mask is None
        assert s.completion_logprobs is None


async def test_a_run_whose_evaluation_failed_gives_no_sample(proxy: InterceptionProxy) -> None:
    job = await run_taskset([strict(n=NOTES)], compacting_agent(), proxy=proxy, group=4)
    failed = {r.trace_id for r in job.runs if r.grade is not None and r.grade.is_error}
    assert len(failed) == 2 and all(r.status == "completed" for r in job.runs)
    samples = list(samples_from_job(job))
    assert len(samples) == 4 and not failed & {s.rollout_id for s in samples}
