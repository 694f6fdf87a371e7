"""Built-in group rewards: each call returns a function for `env.group_reward(weight=)`.

```python
from proctor.env import group_rewards

env.group_reward(weight=0.0)(group_rewards.pass_at_k(4))
env.group_reward(weight=0.0)(group_rewards.grpo_advantage(normalize=True))
```

A member that was not graded (`reward` None) counts as reward 0 (and as not passed).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

from ._rewards import GroupMember

__all__ = ["best_of_n", "grpo_advantage", "pass_at_k", "rank"]

PerGroup = Callable[[Sequence[GroupMember]], float]
"""A group reward giving every member the same value."""
PerMember = Callable[[Sequence[GroupMember]], list[float]]
"""A group reward giving each member its own value."""


def _rewards(runs: Sequence[GroupMember]) -> list[float]:
    return [0.0 if r.reward is None else r.reward for r in runs]


def pass_at_k(k: int, *, threshold: float = 1.0) -> PerGroup:
    """The unbiased pass@k estimate of the group, the same for every member.

    A member passes when its reward is at least `threshold`; with `n` members of which
    `c` pass, pass@k = 1 - C(n - c, k) / C(n, k). A group smaller than `k` is an error.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"pass_at_k: k must be an int >= 1; got {k!r}")

    def fn(runs: Sequence[GroupMember]) -> float:
        n = len(runs)
        if n < k:
            raise ValueError(f"pass@{k} needs a group of at least {k}; got {n}")
        c = sum(reward >= threshold for reward in _rewards(runs))
        return 1.0 - math.comb(n - c, k) / math.comb(n, k)

    fn.__name__ = fn.__qualname__ = f"pass_at_{k}"
    return fn


def best_of_n() -> PerGroup:
    """The best reward of the group, the same for every member."""

    def best_of_n(runs: Sequence[GroupMember]) -> float:
        return max(_rewards(runs), default=0.0)

    return best_of_n


def rank() -> PerMember:
    """Each member's place in the group in [0, 1]: 0 the lowest reward, 1 the highest.

    Ties share the mean of their places; a group of one gets 1.0.
    """

    def rank(runs: Sequence[GroupMember]) -> list[float]:
        rewards = _rewards(runs)
        n = len(rewards)
        if n < 2:
            return [1.0] * n
        # Place of a value: members below it, plus half of the others equal to it.
        return [
            (sum(o < r for o in rewards) + (sum(o == r for o in rewards) - 1) / 2) / (n - 1)
            for r in rewards
        ]

    return rank


def grpo_advantage(*, normalize: bool = False) -> PerMember:
    """GRPO's advantage per member: reward minus the group mean, over the std if `normalize`.

    The std is the population standard deviation; a group whose rewards are all equal
    gets 0 for every member.
    """

    def grpo_advantage(runs: Sequence[GroupMember]) -> list[float]:
        rewards = _rewards(runs)
        mean = statistics.fmean(rewards)
        std = statistics.pstdev(rewards) if normalize else 1.0
        return [(r - mean) / std if std else 0.0 for r in rewards]

    return grpo_advantage
