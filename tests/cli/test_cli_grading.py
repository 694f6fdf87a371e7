"""`proctor run --judge-model` and `proctor run --model` then `proctor export`: a judge
graded through its own proxy, and a model run that leaves training samples behind."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import write
from test_cli_models import run_cli

from proctor.testing import FakeModelServer, FakeRequest, Reply

JUDGED = """
from proctor import Environment
from proctor.env import graders

env = Environment("essays")


@env.template
async def essay(topic: str):
    answer = yield f"Write one word about {topic}"


essay.reward(graders.judge("any", "Full marks for one word."))

tasks = [essay(topic="sea"), essay(topic="sky")]


def solve(prompt):
    return "blue"
"""


async def test_a_judge_model_grades_every_rollout_through_its_proxy(tmp_path: Path) -> None:
    source = write(tmp_path / "tasks.py", JUDGED)
    record = tmp_path / "record"

    def reply(request: FakeRequest) -> Reply:
        assert "Full marks for one word." in json.dumps(request.json["messages"])
        return Reply(text="score: 0.9")

    async with FakeModelServer(reply, models=("judge",)) as fake:
        code, out, err = await run_cli(
            "run", source, "--agent", f"{source}:solve", "--judge-model",
            f"vllm/judge@{fake.url}", "--output-dir", record, "--json",
        )  # fmt: skip
        assert code == 0, err
        assert len([r for r in fake.requests if r.api != "models"]) == 2
    summary = json.loads(out)
    assert summary["mean_reward"] == 0.9 and summary["evaluation_failed"] == 0


async def test_without_a_judge_model_the_evaluation_fails_and_says_so(tmp_path: Path) -> None:
    source = write(tmp_path / "tasks.py", JUDGED)
    code, out, err = await run_cli("run", source, "--agent", f"{source}:solve", "--no-record")
    assert code == 0, err
    assert "eval failed" in out  # a column of its own: these are not rewards of 0


async def test_a_model_run_exports_one_sample_per_rollout(tmp_path: Path) -> None:
    source = write(
        tmp_path / "tasks.py",
        """
        from proctor import Environment

        env = Environment("words")

        @env.template
        async def say(word: str):
            answer = yield f"say {word}"
            yield 1.0 if word in str(answer) else 0.0

        tasks = [say(word="apple"), say(word="pear")]
        """,
    )
    record, samples = tmp_path / "record", tmp_path / "samples.jsonl"

    def reply(request: FakeRequest) -> Reply:
        prompt = json.dumps(request.json["messages"])
        return Reply(text="apple" if "apple" in prompt else "pear")

    async with FakeModelServer(reply, models=("m",)) as fake:
        code, _, err = await run_cli(
            "run", source, "--model", f"vllm/m@{fake.url}", "--group", "2",
            "--output-dir", record,
        )  # fmt: skip
        assert code == 0, err
    code, _, err = await run_cli("export", record, "-o", samples)
    assert code == 0, err
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 4
    assert all(row["reward"] == 1.0 and row["advantage"] == 0.0 for row in rows)
    assert all(row["completion"][-1]["content"] in ("apple", "pear") for row in rows)
