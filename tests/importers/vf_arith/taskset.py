"""Three questions; `correct` (weight 0.75) and `terse` (weight 0.25), and a metric."""

import verifiers.v1 as vf  # type: ignore[import-not-found,unused-ignore]

QUESTIONS = [("What is 2 + 3?", "5"), ("What is 7 + 6?", "13"), ("What is 10 + 32?", "42")]


class ArithData(vf.TaskData):
    answer: str


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=0.75)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)

    @vf.reward(weight=0.25)
    def terse(self, trace: vf.Trace) -> float:
        if not trace.last_reply:
            raise ValueError("no reply to measure")
        return float(len(trace.last_reply) <= 3)

    @vf.metric
    async def reply_length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 3


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self) -> list[ArithTask]:
        rows = QUESTIONS[: self.config.num_tasks]
        return [
            ArithTask(ArithData(id=f"sum-{i}", prompt=q, answer=a), self.config.task)
            for i, (q, a) in enumerate(rows)
        ]
