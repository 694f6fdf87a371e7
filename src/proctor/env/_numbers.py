"""Numbers in free text: the last one written wins (`graders.numeric`, a judge's score)."""

from __future__ import annotations

import re

__all__ = ["last_number"]

# One number in free text. Matches are scanned left to right and the last one wins.
_NUMBER = re.compile(
    r"""
    (?<![0-9.])                          # never start inside another number
    (?:(?<![\w)\]])(?P<sign>[-+\u2212]))? # a sign, unless it joins two tokens as in "3-4"
    [$\u20ac\u00a3\u00a5]?               # an optional currency symbol: "$12", "-$12"
    (?:
        (?<!/)                           # a simple fraction "3/4", not a date "1/2/2024"
        (?P<num>[0-9]+)/(?P<den>[0-9]+)
        (?![0-9]|[/.,][0-9])
      |
        (?P<mantissa>
            [0-9]{1,3}(?:,[0-9]{3})+(?![0-9])(?:\.[0-9]+)?   # 1,234 and 1,234.5
          | [0-9]+(?:\.[0-9]+)?                             # 42, 3.5 ("42." stops at 42)
          | \.[0-9]+                                        # .5
        )
        (?P<exponent>[eE][-+]?[0-9]+)?                      # 1e-3, 1.5E+16
    )
    """,
    re.VERBOSE,
)


def _value(match: re.Match[str]) -> float | None:
    """The value of one `_NUMBER` match, or `None` if it has none (e.g. `1/0`)."""
    negative = match["sign"] in ("-", "\u2212")
    try:
        if match["num"] is not None:
            value = int(match["num"]) / int(match["den"])
        else:
            value = float(match["mantissa"].replace(",", "") + (match["exponent"] or ""))
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    return -value if negative else value


def last_number(text: str) -> float | None:
    """The last number written in `text`, or `None` if there is none."""
    for match in reversed(list(_NUMBER.finditer(text))):
        value = _value(match)
        if value is not None:
            return value
    return None
