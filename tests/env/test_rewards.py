"""Rewards and metrics compose the grade: weighted subscores, metrics beside them, and a
raising reward recorded as its error (evaluation failed), never a crash. Driven through
the in-process runtime and `rollout()`, as a user runs them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from proctor import Environment, LocalRuntime, TemplateError, agent_from_fn, rollout
from proctor.env import GradeContext, TaskView
from proctor.records import Grade, Task


async def graded(env: Environment, task: Task, answer: Any = "42") -> Grade:
    run = await rollout(task, agent_from_fn(lambda p: answer), runtime=LocalRuntime(env))
    assert run.grade is not None, run.error
    return run.grade


def counting_env() -> Environment:
    env = Environment("rewards-counting")

    @env.template
    async def count(word: str, n: int) -> Any:
        yield f"How many letters in {word}?"

    @env.reward(weight=3.0)
    def exact(answer: str, task: TaskView) -> float:
        return float(answer.strip() == str(len(task.word)))

    @env.reward
    async def short(answer: str) -> float:
        return 1.0 if len(answer) < 3 else 0.0

    @env.metric
    def length(answer: str) -> int:
        return len(answer)

    return env


async def test_rewards_are_weighted_subscores_and_metrics_do_not_weigh() -> None:
    env = counting_env()
    grade = await graded(env, env.tasks["count"](word="abc", n=1), "3")
    assert grade.subscores == [
        {"name": "exact", "value": 1.0, "weight": 3.0},
        {"name": "short", "value": 1.0, "weight": 1.0},
    ]
    assert grade.reward == 1.0
    assert grade.metrics == {"length": 1.0}
    assert grade.is_error is False
    assert "proctor_warnings" not in grade.info  # ending after the first yield is fine

    wrong = await graded(env, env.tasks["count"](word="abc", n=1), "four")
    assert wrong.reward == 0.0
    assert wrong.metrics == {"length": 4.0}


async def test_a_raising_reward_is_its_error_and_marks_the_evaluation_failed() -> None:
    env = Environment("rewards-raising")

    @env.template
    async def t() -> Any:
        yield "anything"

    @env.reward(weight=1.0)
    def fine() -> float:
        return 1.0

    @env.reward(weight=1.0)
    def broken(answer: str) -> float:
        raise ValueError(f"cannot read {answer}")

    @env.metric
    def not_a_number() -> Any:
        return "many"

    grade = await graded(env, t(), "x")
    assert grade.is_error is True
    assert grade.reward == 0.5  # the failed reward counts 0 with its weight
    assert grade.subscores[1] == {
        "name": "broken",
        "value": 0.0,
        "weight": 1.0,
        "info": {"error": "ValueError: cannot read x"},
    }
    assert grade.info["errors"] == {
        "broken": "ValueError: cannot read x",
        "not_a_number": "TypeError: returned str 'many', not a number",
    }
    assert grade.metrics == {}


async def test_a_reward_outside_zero_one_is_an_error() -> None:
    env = Environment("rewards-range")

    @env.template
    async def t() -> Any:
        yield "anything"

    @env.reward
    def too_much() -> float:
        return 2.0

    grade = await graded(env, t())
    assert grade.is_error is True
    assert grade.info["errors"] == {"too_much": "ValueError: returned 2.0, outside [0, 1]"}


async def test_a_second_yield_is_one_more_subscore_named_after_the_template() -> None:
    env = Environment("rewards-second")

    @env.template
    async def judged() -> Any:
        answer = yield "say yes"
        yield {"score": 0.25, "info": {"why": "partial"}, "content": "half right"}
        del answer

    @judged.reward(weight=1.0)
    def said_yes(answer: str) -> bool:
        return answer == "yes"

    grade = await graded(env, judged(), "yes")
    assert grade.subscores == [
        {"name": "said_yes", "value": 1.0, "weight": 1.0},
        {"name": "judged", "value": 0.25, "weight": 1.0},
    ]
    assert grade.reward == pytest.approx(0.625)
    assert (grade.info, grade.content) == ({"why": "partial"}, "half right")


async def test_template_rewards_apply_to_that_template_alone() -> None:
    env = Environment("rewards-scoped")

    @env.template
    async def a() -> Any:
        yield "a"

    @env.template
    async def b() -> Any:
        yield "b"
        yield 1.0

    @env.reward
    def everywhere() -> float:
        return 1.0

    @a.reward(weight=2.0)
    def only_a() -> float:
        return 0.0

    assert [s["name"] for s in (await graded(env, a())).subscores] == ["everywhere", "only_a"]
    assert [s["name"] for s in (await graded(env, b())).subscores] == ["everywhere", "b"]


async def test_metrics_without_rewards_keep_the_template_score() -> None:
    env = Environment("rewards-metrics-only")

    @env.template
    async def t() -> Any:
        yield "anything"
        yield {"score": 0.5, "info": {"kept": True}}

    @env.metric
    async def steps(trace: list[dict[str, Any]]) -> int:
        return len(trace)

    grade = await graded(env, t())
    assert grade.reward == 0.5
    assert grade.info == {"kept": True, "metrics": {"steps": 2.0}}  # user, assistant


async def test_injected_task_prompt_run_and_state() -> None:
    env = Environment("rewards-injection")
    seen: dict[str, Any] = {}

    class Args(BaseModel):
        word: str

    @env.template(input=Args)
    async def typed(word: str) -> Any:
        yield {"prompt": f"spell {word}"}

    @env.template
    async def plain(word: str) -> Any:
        yield f"spell {word}"

    @env.setup
    def remember(state: dict[str, Any], task: Any) -> None:
        state["setup"] = task.word

    @env.finalize
    async def later(state: dict[str, Any], answer: str) -> None:
        state["finalized"] = answer

    @env.reward
    def look(task: Any, prompt: Any, run: GradeContext, state: dict[str, Any]) -> float:
        seen.update(task=task, prompt=prompt, run=run, state=dict(state))
        return 1.0

    await graded(env, typed(word="cat"), "c-a-t")
    assert seen["task"] == Args(word="cat")
    assert seen["prompt"] == "spell cat"
    assert seen["state"] == {"setup": "cat", "finalized": "c-a-t"}
    run = seen["run"]
    assert (run.answer, run.prompt, run.stop_reason) == ("c-a-t", "spell cat", None)
    assert run.trace == [  # `run` needs the trace: the driver sent it
        {"kind": "user", "content": "spell cat", "data": None},
        {"kind": "assistant", "content": "c-a-t", "data": None},
    ]

    await graded(env, plain(word="dog"))
    view = seen["task"]
    assert (view.id, view.args, view.word) == ("plain", {"word": "dog"}, "dog")
    with pytest.raises(AttributeError, match="no arg 'colour'"):
        view.colour  # noqa: B018


async def test_the_shell_is_injected_by_its_capability_name() -> None:
    env = Environment("rewards-shell")
    env.add_shell()

    @env.template
    async def write(path: str) -> Any:
        yield f"write to {path}"

    @env.finalize
    async def apply(shell: Any, answer: str, task: TaskView) -> None:
        await shell.run(f"printf %s '{answer}' > {task.path}")

    @env.reward
    async def written(shell: Any, task: TaskView) -> float:
        result = await shell.run(f"cat {task.path}")
        return float(result.stdout == "hello")

    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        grade = await graded(env, write(path=f"{folder}/out.txt"), "hello")
    assert grade.reward == 1.0, grade


def test_a_name_that_cannot_be_injected_is_refused_at_registration() -> None:
    env = Environment("rewards-refused")

    @env.template
    async def t() -> Any:
        yield "x"

    with pytest.raises(TemplateError, match="cannot inject parameter 'shell'"):

        @env.reward
        def needs_shell(shell: Any) -> float:
            return 1.0

    with pytest.raises(TemplateError, match="cannot inject parameter 'colour'"):
        t.metric(lambda colour: 1.0)

    with pytest.raises(TemplateError, match="cannot inject parameter 'x'"):
        env.template(solution=lambda x: x)(_gen)

    @env.reward
    def defaulted(answer: Any, extra: int = 3) -> float:  # a default needs no injection
        return 1.0


async def _gen() -> Any:
    yield "x"


def test_registration_checks_names_weights_and_timeouts() -> None:
    env = Environment("rewards-checks")

    @env.template
    async def t() -> Any:
        yield "x"

    @env.reward
    def same() -> float:
        return 1.0

    with pytest.raises(TemplateError, match="'same': a reward or metric has that name"):
        t.metric(name="same")(lambda: 1.0)
    with pytest.raises(TemplateError, match="weight must be finite and >= 0"):
        env.reward(weight=-1.0)(lambda: 1.0)
    with pytest.raises(TemplateError, match="weight must be finite and >= 0"):
        env.reward(weight=math.inf)(lambda: 1.0)
    with pytest.raises(TemplateError, match="timeout must be > 0"):
        env.setup(timeout=0)(lambda: None)
    t.reward(name="other")(lambda: 1.0)  # a distinct name is fine
    other = Environment("rewards-checks-2")

    @other.template
    async def u() -> Any:
        yield "x"

    u.reward(name="other")(lambda: 1.0)  # another template's names do not clash


# Hypothesis: whatever the rewards return, the score is their weighted mean.
reward_specs = st.lists(
    st.tuples(
        st.floats(0, 1, allow_nan=False),
        st.floats(0, 100, allow_nan=False),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs=reward_specs)
async def test_the_score_is_the_weighted_mean_of_the_subscores(
    specs: list[tuple[float, float, bool]],
) -> None:
    env = Environment("rewards-hypothesis")

    @env.template
    async def t() -> Any:
        yield "x"

    for i, (value, weight, is_async) in enumerate(specs):
        env.reward(weight=weight, name=f"r{i}")(_returning(value, is_async))

    grade = await graded(env, t())
    subs = grade.subscores
    assert [(s["value"], s["weight"]) for s in subs] == [(v, w) for v, w, _ in specs]
    total = sum(w for _, w, _ in specs)
    expected = sum(v * w for v, w, _ in specs) / total if total else 0.0
    assert grade.reward == pytest.approx(expected)
    assert 0.0 <= grade.reward <= 1.0


def _returning(value: float, is_async: bool) -> Any:
    if is_async:

        async def async_reward() -> float:
            return value

        return async_reward
    return lambda: value


async def test_functions_registered_after_a_run_apply_to_the_next() -> None:
    env = Environment("rewards-late")

    @env.template
    async def t() -> Any:
        yield "x"
        yield 0.5

    assert (await graded(env, t())).subscores == []

    @env.reward
    def late() -> float:
        return 1.0

    assert [s["name"] for s in (await graded(env, t())).subscores] == ["late", "t"]

    @t.metric
    def later() -> float:
        return 2.0

    assert (await graded(env, t())).metrics == {"later": 2.0}
