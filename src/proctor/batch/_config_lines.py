"""Where each field of a JSON or TOML config is: `path -> line`, for error messages.

Both scanners run only when a config failed validation. A path is a tuple of keys
and list indexes, as in the parsed document; a member maps to the line of its key,
a list item to the line it starts on, and `()` (the document) to its first line.
"""

from __future__ import annotations

import json
import re

__all__ = ["json_lines", "toml_lines"]

Path = tuple[str | int, ...]

_WS = " \t\n\r"


def json_lines(text: str) -> dict[Path, int]:
    """The line of every member and item of a well-formed JSON document."""
    lines: dict[Path, int] = {}
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in _WS:
            i += 1
        return i

    def line(i: int) -> int:
        return text.count("\n", 0, i) + 1

    def value(i: int, path: Path) -> int:
        i = skip(i)
        if text[i] == "{":
            i = skip(i + 1)
            while text[i] != "}":
                key, after = decoder.raw_decode(text, i)
                lines[(*path, key)] = line(i)
                i = skip(value(skip(after) + 1, (*path, key)))  # past the colon
                i = skip(i + 1) if text[i] == "," else i
            return i + 1
        if text[i] == "[":
            i, index = skip(i + 1), 0
            while text[i] != "]":
                lines[(*path, index)] = line(i)
                i = skip(value(i, (*path, index)))
                i, index = (skip(i + 1) if text[i] == "," else i), index + 1
            return i + 1
        return decoder.raw_decode(text, i)[1]

    lines[()] = line(skip(0))
    value(0, ())
    return lines


_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(
    r"""\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*="""
)
_PART = re.compile(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""")


def toml_lines(text: str) -> dict[Path, int]:
    """The line of every key, table and array-of-tables entry in a TOML document.

    Keys inside an inline table share its line (TOML keeps inline tables on one
    line); items of a multi-line array of inline tables each get their own line.
    """
    lines: dict[Path, int] = {(): 1}
    table: Path = ()
    counts: dict[tuple[str, ...], int] = {}  # array of tables -> its latest entry
    array: tuple[Path, int] | None = None  # an open multi-line array: its path, next index
    quote: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if quote is not None:  # inside a multi-line string
            if raw.count(quote) % 2:
                quote = None
            continue
        if array is not None:
            array = _array_line(raw, array, number, lines)
            continue
        header = _HEADER.match(raw)
        if header is not None:
            keys = _keys(header[2])
            if header[1] == "[[":
                counts[keys] = counts.get(keys, -1) + 1
                lines.setdefault(_locate(keys[:-1], counts) + keys[-1:], number)
            table = _locate(keys, counts)
            lines[table] = number
            continue
        key = _KEY.match(raw)
        if key is None:
            continue
        path = (*table, *_keys(key[1]))
        lines[path] = number
        rest = raw[key.end() :]
        quote = next((q for q in ('"""', "'''") if rest.count(q) % 2), None)
        if quote is None and _opens_array(rest):
            array = (path, 0)
    return lines


def _locate(keys: tuple[str, ...], counts: dict[tuple[str, ...], int]) -> Path:
    """A table header's path: each array of tables it passes through at its latest entry."""
    path: list[str | int] = []
    for i, key in enumerate(keys):
        path.append(key)
        if keys[: i + 1] in counts:
            path.append(counts[keys[: i + 1]])
    return tuple(path)


def _array_line(
    raw: str, array: tuple[Path, int], number: int, lines: dict[Path, int]
) -> tuple[Path, int] | None:
    path, index = array
    stripped = raw.strip()
    if stripped.startswith("]"):
        return None
    if stripped and not stripped.startswith("#"):
        lines[(*path, index)] = number
        index += 1
    return (
        None
        if stripped.rstrip(",").endswith("]") and not stripped.startswith("[")
        else (
            path,
            index,
        )
    )


def _opens_array(rest: str) -> bool:
    body = rest.split("#", 1)[0].strip()
    return body.startswith("[") and body.count("[") > body.count("]")


def _keys(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip("\"'") for part in _PART.findall(dotted))
