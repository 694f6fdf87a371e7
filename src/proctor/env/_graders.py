"""Text graders for the second `yield` of a task template.

Every grader takes the agent's `answer` as `object` and returns a float in
`[0, 1]`. The answer is read as text: a `str` is used as it is, `None` is the
empty string, and anything else goes through `str()`. Expected values are read
the same way.

```python
@env.template()
async def capital(country: str, city: str):
    answer = yield f"What is the capital of {country}?"
    yield graders.normalized_match(answer, city)
```

| grader             | 1.0 when                                                        |
|--------------------|-----------------------------------------------------------------|
| `exact`            | the texts are equal once surrounding whitespace is stripped     |
| `contains`         | the expected text occurs in the answer (case-insensitive)       |
| `numeric`          | the last number in the answer is within tolerance of `expected` |
| `normalized_match` | the texts are equal after `normalize` (SQuAD exact match)       |
| `f1`               | partial credit: SQuAD token-level F1 of the normalized texts    |

`normalized_match` and `f1` also accept a list of acceptable answers and score
the best of them.

Graders beyond text run something in the environment's substrate, or ask a model
(async; use them in rewards, e.g. `@env.reward`):

| grader          | does                                                               |
|-----------------|--------------------------------------------------------------------|
| `command`       | runs a shell command; 1.0 when its exit code and stdout are right  |
| `run`           | runs a shell command and returns its `ShellResult`, to score       |
| `run_uv_script` | runs a PEP 723 script with `uv run --script`, in an env of its own |
| `judge`         | a reward `(prompt, answer, task, judge)`: a model scores by rubric |
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence

from ._graders_exec import command, run, run_uv_script
from ._judge import judge_reward as judge
from ._numbers import last_number

__all__ = [
    "command",
    "contains",
    "exact",
    "f1",
    "judge",
    "normalize",
    "normalized_match",
    "numeric",
    "run",
    "run_uv_script",
]


def _text(value: object) -> str:
    """Read `value` as text: `None` is empty, a `str` is itself, anything else is `str()`."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return str(value)


def _candidates(expected: object) -> list[str]:
    """The acceptable answers: each item of a list, tuple or set, or `expected` alone."""
    if isinstance(expected, list | tuple | set | frozenset):
        items = [_text(item) for item in expected]
        if not items:
            raise ValueError("expected is an empty collection; give at least one acceptable answer")
        return items
    return [_text(expected)]


def exact(answer: object, expected: object) -> float:
    """Score 1.0 iff the answer equals the expected text, ignoring surrounding whitespace.

    Args:
        answer: The agent's answer; `None` counts as the empty string.
        expected: The expected text; non-strings are converted with `str()`.

    Returns:
        1.0 if `answer.strip() == expected.strip()`, else 0.0. Case and inner
        whitespace matter.
    """
    return 1.0 if _text(answer).strip() == _text(expected).strip() else 0.0


def contains(answer: object, expected: object, *, case_sensitive: bool = False) -> float:
    """Score 1.0 iff the expected text occurs somewhere in the answer.

    Args:
        answer: The agent's answer; `None` counts as the empty string.
        expected: The text to look for; surrounding whitespace is ignored. An
            empty expected text occurs in every answer.
        case_sensitive: Compare case exactly; by default both sides are
            case-folded (so `"STRASSE"` contains `"straße"`).

    Returns:
        1.0 if the expected text is a substring of the answer, else 0.0.
    """
    haystack = _text(answer)
    needle = _text(expected).strip()
    if not case_sensitive:
        haystack = haystack.casefold()
        needle = needle.casefold()
    return 1.0 if needle in haystack else 0.0


def numeric(
    answer: object,
    expected: float,
    *,
    tolerance: float = 1e-6,
    relative: bool = False,
) -> float:
    """Score 1.0 iff the last number in the answer is within `tolerance` of `expected`.

    The last number wins, so `"3 + 4 = 7"` reads as 7. Understood forms:
    signs (`-3`, `+3`, and the Unicode minus U+2212), decimals (`3.5`, `.5`),
    thousands separators (`1,234.5`), exponents (`1e-3`, `1.5E+16`), currency
    (`$12`, `-$12`), a trailing period (`42.`) and simple fractions (`3/4`
    reads as 0.75; a chain like the date `1/2/2024` is three numbers). A
    hyphen between two tokens is not a sign (`3-4` reads as 4), and a percent
    sign is ignored (`50%` reads as 50).

    Args:
        answer: The agent's answer; `None` counts as the empty string.
        expected: The expected value; must be finite.
        tolerance: The largest accepted difference; must not be negative.
        relative: Read `tolerance` as a fraction of `abs(expected)` rather
            than as an absolute difference. With `expected == 0` only an exact
            zero then matches.

    Returns:
        1.0 if a number was found and is close enough, else 0.0.

    Raises:
        ValueError: `expected` is not finite, or `tolerance` is negative or NaN.
    """
    target = float(expected)
    if not math.isfinite(target):
        raise ValueError(f"expected must be a finite number, got {expected!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be a non-negative number, got {tolerance!r}")
    value = last_number(_text(answer))
    if value is None or not math.isfinite(value):
        return 0.0
    limit = tolerance * abs(target) if relative else tolerance
    return 1.0 if abs(value - target) <= limit else 0.0


_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def _is_punctuation(char: str) -> bool:
    return char in _PUNCTUATION or unicodedata.category(char).startswith("P")


def normalize(text: str) -> str:
    """Normalize text the way SQuAD does before comparing answers.

    Steps, in order: case-fold; strip accents (NFKD, then drop combining
    marks); delete punctuation (ASCII punctuation and every Unicode `P*`
    character, so `"don't"` becomes `"dont"`); remove the English articles
    `a`, `an` and `the` as whole words; collapse runs of whitespace to one
    space and trim the ends.

    Args:
        text: The text to normalize; `None` counts as the empty string and
            non-strings are converted with `str()`.

    Returns:
        The normalized text, e.g. `normalize("The  Café!") == "cafe"`.
    """
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", _text(text)).casefold())
    kept = "".join(
        char for char in folded if not unicodedata.combining(char) and not _is_punctuation(char)
    )
    return " ".join(_ARTICLES.sub(" ", kept).split())


def normalized_match(answer: object, expected: str | Sequence[str]) -> float:
    """Score 1.0 iff the answer equals an expected text after `normalize` (SQuAD EM).

    Args:
        answer: The agent's answer; `None` counts as the empty string.
        expected: The acceptable answer, or a list of them.

    Returns:
        1.0 if the normalized answer equals any normalized expected text, else 0.0.

    Raises:
        ValueError: `expected` is an empty list.
    """
    got = normalize(_text(answer))
    return 1.0 if any(got == normalize(item) for item in _candidates(expected)) else 0.0


def _token_f1(answer_tokens: list[str], expected_tokens: list[str]) -> float:
    if not answer_tokens and not expected_tokens:
        return 1.0
    common = Counter(answer_tokens) & Counter(expected_tokens)
    overlap = sum(common.values())
    # 2PR / (P + R) with P = overlap/len(answer), R = overlap/len(expected).
    return 2 * overlap / (len(answer_tokens) + len(expected_tokens))


def f1(answer: object, expected: str | Sequence[str]) -> float:
    """Token-level F1 between answer and expected text, as in SQuAD.

    Both texts are normalized with `normalize` and split on whitespace; the
    tokens are compared as bags (a repeated token counts as often as it occurs
    in both). Two empty texts score 1.0; exactly one empty text scores 0.0.

    Args:
        answer: The agent's answer; `None` counts as the empty string.
        expected: The acceptable answer, or a list of them.

    Returns:
        The F1 score in `[0, 1]`, the best over the acceptable answers.

    Raises:
        ValueError: `expected` is an empty list.
    """
    got = normalize(_text(answer)).split()
    return max(_token_f1(got, normalize(item).split()) for item in _candidates(expected))
