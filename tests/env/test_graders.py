"""Tests for the text graders in `proctor.env._graders`."""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from proctor.env._graders import contains, exact, f1, normalize, normalized_match, numeric

# Latin text with accents and mixed case, where upper/lower/casefold round-trip cleanly.
LATIN = st.text(alphabet=string.ascii_letters + string.digits + " \t\néÉüÜñÑçÇåÅøØ", max_size=40)
PUNCTUATION = st.text(alphabet=string.punctuation + "¿¡“”\u2018\u2019—\u2013…«»·", max_size=5)


# --- exact -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "score"),
    [
        ("Paris", "Paris", 1.0),
        ("  Paris\n", "Paris", 1.0),
        ("Paris", "  Paris\t", 1.0),
        ("paris", "Paris", 0.0),
        ("Paris, France", "Paris", 0.0),
        ("New  York", "New York", 0.0),
        ("", "", 1.0),
        (None, "", 1.0),
        (None, "None", 0.0),
        (42, "42", 1.0),
        (42, 42, 1.0),
        (4.5, "4.5", 1.0),
        (["a"], "['a']", 1.0),
    ],
)
def test_exact(answer: object, expected: object, score: float) -> None:
    assert exact(answer, expected) == score


# --- contains ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "score"),
    [
        ("The capital is Paris.", "paris", 1.0),
        ("The capital is PARIS.", "Paris", 1.0),
        ("The capital is Lyon.", "Paris", 0.0),
        ("Die Straße", "STRASSE", 1.0),
        ("Paris", " Paris\n", 1.0),
        ("Par is", "Paris", 0.0),
        (None, "x", 0.0),
        (None, "", 1.0),
        ("anything", "", 1.0),
        (12345, 234, 1.0),
    ],
)
def test_contains(answer: object, expected: object, score: float) -> None:
    assert contains(answer, expected) == score


def test_contains_case_sensitive() -> None:
    assert contains("The capital is Paris.", "Paris", case_sensitive=True) == 1.0
    assert contains("The capital is PARIS.", "Paris", case_sensitive=True) == 0.0
    assert contains("The capital is paris.", "Paris", case_sensitive=True) == 0.0


# --- numeric -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("42", 42),
        ("-3", -3),
        ("+3", 3),
        ("\u22127", -7),
        ("3.5", 3.5),
        (".5", 0.5),
        ("1,234", 1234),
        ("1,234,567.25", 1234567.25),
        ("1e-3", 0.001),
        ("1.5E+16", 1.5e16),
        ("$12", 12),
        ("-$12", -12),
        ("$-12", -12),
        ("€1,234.50", 1234.5),
        ("42.", 42),
        ("The answer is 42.", 42),
        ("The answer is 3.", 3),
        ("3 + 4 = 7", 7),
        ("First 10, then 20, finally -5.", -5),
        ("(-3)", -3),
        ("x = -2.5", -2.5),
        ("3/4", 0.75),
        ("-3/4", -0.75),
        ("about 1/3 of them", 1 / 3),
        ("3-4", 4),
        ("2024-01-05", 5),
        ("12/25/2023", 2023),
        ("1/2.5", 2.5),
        ("1,2345", 2345),
        ("50%", 50),
        ("7 or 1/0", 7),
        ("Result: 17 apples", 17),
        (17, 17),
        (2.5, 2.5),
        (1e-7, 1e-7),
    ],
)
def test_numeric_extracts_last_number(answer: object, expected: float) -> None:
    assert numeric(answer, expected) == 1.0


@pytest.mark.parametrize(
    "answer",
    ["", None, "no numbers here", "forty-two", "1/0", "e5", "-", "$", ".", True],
)
def test_numeric_no_number_scores_zero(answer: object) -> None:
    assert numeric(answer, 0.0) == 0.0


def test_numeric_wrong_number() -> None:
    assert numeric("The answer is 41", 42) == 0.0
    assert numeric("42 then 41", 42) == 0.0
    assert numeric("-42", 42) == 0.0


def test_numeric_absolute_tolerance() -> None:
    assert numeric("3.14", math.pi) == 0.0
    assert numeric("3.14", math.pi, tolerance=0.01) == 1.0
    assert numeric("3.1415926", math.pi) == 1.0
    assert numeric("0.30000000000000004", 0.3) == 1.0
    assert numeric("10", 10, tolerance=0.0) == 1.0
    assert numeric("10.5", 10, tolerance=0.5) == 1.0
    assert numeric("10.6", 10, tolerance=0.5) == 0.0


def test_numeric_relative_tolerance() -> None:
    assert numeric("1010", 1000, tolerance=0.01, relative=True) == 1.0
    assert numeric("1011", 1000, tolerance=0.01, relative=True) == 0.0
    assert numeric("-990", -1000, tolerance=0.01, relative=True) == 1.0
    assert numeric("0", 0, tolerance=0.5, relative=True) == 1.0
    assert numeric("0.001", 0, tolerance=0.5, relative=True) == 0.0
    # The same tolerance read absolutely would accept it.
    assert numeric("1000.5", 1000, tolerance=1e-6, relative=True) == 0.0
    assert numeric("1000.0005", 1000, tolerance=1e-6, relative=True) == 1.0


def test_numeric_overflowing_answer_scores_zero() -> None:
    assert numeric("1e999", 1.0) == 0.0
    assert numeric("1e999", 1.0, tolerance=1e300) == 0.0


@pytest.mark.parametrize("expected", [math.nan, math.inf, -math.inf])
def test_numeric_non_finite_expected_raises(expected: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        numeric("42", expected)


@pytest.mark.parametrize("tolerance", [-1.0, math.nan])
def test_numeric_bad_tolerance_raises(tolerance: float) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        numeric("42", 42, tolerance=tolerance)


# --- normalize ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  An   apple,\ta day!\n", "apple day"),
        ("Café Crème", "cafe creme"),
        ("São Paulo", "sao paulo"),
        ("don't", "dont"),
        ("well-known", "wellknown"),
        ("“Quoted” — ¿really?", "quoted really"),
        ("theater another", "theater another"),
        ("A", ""),
        ("the the the", ""),
        ("", ""),
        ("Die Straße", "die strasse"),
        ("ﬁne", "fine"),
        ("Ⅻ", "xii"),
        ("1,234.5", "12345"),
    ],
)
def test_normalize(text: str, normalized: str) -> None:
    assert normalize(text) == normalized


@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


@given(st.text())
def test_normalize_output_is_trimmed_and_single_spaced(text: str) -> None:
    out = normalize(text)
    assert out == out.strip()
    assert "  " not in out
    assert not set(string.punctuation) & set(out)


# --- normalized_match --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "score"),
    [
        ("the Eiffel Tower!", "Eiffel tower", 1.0),
        ("Eiffel", "Eiffel Tower", 0.0),
        ("  CAFÉ. ", "cafe", 1.0),
        ("Paris", ["London", "paris", "Rome"], 1.0),
        ("Madrid", ["London", "paris", "Rome"], 0.0),
        ("Paris", ("Paris, France", "Paris"), 1.0),
        (None, "", 1.0),
        (None, "the", 1.0),
        (None, "x", 0.0),
        (42, "42", 1.0),
    ],
)
def test_normalized_match(answer: object, expected: str | list[str], score: float) -> None:
    assert normalized_match(answer, expected) == score


def test_normalized_match_empty_list_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        normalized_match("x", [])


@given(LATIN)
def test_normalized_match_is_case_invariant(text: str) -> None:
    for variant in (text.upper(), text.lower(), text.swapcase(), text.title()):
        assert normalized_match(variant, text) == 1.0
        assert normalized_match(text, variant) == 1.0


@given(LATIN, PUNCTUATION, PUNCTUATION)
def test_normalized_match_ignores_surrounding_punctuation(
    text: str, before: str, after: str
) -> None:
    assert normalized_match(f"{before}{text}{after}", text) == 1.0
    assert normalized_match(text, f" {before} {text} {after} ") == 1.0


@given(st.text(), st.text())
def test_normalized_match_agrees_with_f1_on_equality(answer: str, expected: str) -> None:
    if normalized_match(answer, expected) == 1.0:
        assert f1(answer, expected) == 1.0


# --- f1 ----------------------------------------------------------------------------------------


def test_f1_examples() -> None:
    assert f1("the Eiffel Tower", "Eiffel Tower") == 1.0
    assert f1("Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    assert f1("the big red Eiffel Tower", "Eiffel Tower") == pytest.approx(2 * 2 / (4 + 2))
    assert f1("London", "Paris") == 0.0
    # Bag of words: repeated tokens count only as often as they occur on both sides.
    assert f1("paris paris paris", "paris") == pytest.approx(2 * 1 / (3 + 1))
    assert f1("paris paris", "paris paris") == 1.0
    # Word order does not matter.
    assert f1("tower eiffel", "Eiffel Tower") == 1.0


def test_f1_empty_sides() -> None:
    assert f1("", "") == 1.0
    assert f1(None, "the") == 1.0  # both normalize to nothing
    assert f1("!!!", "a an the") == 1.0
    assert f1("", "Paris") == 0.0
    assert f1("Paris", "") == 0.0
    assert f1(None, "Paris") == 0.0


def test_f1_list_takes_best() -> None:
    assert f1("Eiffel", ["Louvre", "Eiffel Tower", "Eiffel"]) == 1.0
    assert f1("Eiffel", ["Louvre", "Eiffel Tower"]) == pytest.approx(2 / 3)
    assert f1("Eiffel", ("Louvre",)) == 0.0


def test_f1_empty_list_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        f1("x", [])


@given(st.text(), st.text())
def test_f1_is_symmetric_and_bounded(a: str, b: str) -> None:
    score = f1(a, b)
    assert 0.0 <= score <= 1.0
    assert score == f1(b, a)


@given(st.text())
def test_f1_of_text_with_itself_is_one(text: str) -> None:
    assume(normalize(text))
    assert f1(text, text) == 1.0


@given(st.lists(st.sampled_from(["paris", "tower", "eiffel", "big"]), min_size=1), st.text())
def test_f1_positive_iff_tokens_overlap(words: list[str], other: str) -> None:
    answer = " ".join(words)
    overlap = set(normalize(answer).split()) & set(normalize(other).split())
    assert (f1(answer, other) > 0.0) == bool(overlap)


# --- properties across graders -----------------------------------------------------------------


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numeric_finds_repr_of_any_finite_float(x: float) -> None:
    assert numeric(f"the answer is {x!r}", x, tolerance=0.0) == 1.0
    assert numeric(f"the answer is {x!r}.", x, tolerance=0.0) == 1.0
    assert numeric(f"I computed 12 and 7, so the answer is {x!r}", x, tolerance=0.0) == 1.0


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_numeric_finds_thousands_separated_integers(n: int) -> None:
    assert numeric(f"Total: {n:,} units", n, tolerance=0.0) == 1.0


@given(st.one_of(st.none(), st.text(), st.integers(), st.floats()), st.text())
def test_graders_return_scores_in_unit_interval(answer: object, expected: str) -> None:
    for score in (
        exact(answer, expected),
        contains(answer, expected),
        contains(answer, expected, case_sensitive=True),
        normalized_match(answer, expected),
        numeric(answer, 1.0),
    ):
        assert score in (0.0, 1.0)
        assert isinstance(score, float)
    assert 0.0 <= f1(answer, expected) <= 1.0
