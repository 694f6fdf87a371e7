"""Loading a batch config: decode JSON or TOML, validate, and name each problem's
field path and line."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from .._errors import BatchConfigError
from ._config import BatchConfig, ConfigProblem
from ._config_lines import json_lines, toml_lines

__all__ = ["load_config", "parse_config"]


def load_config(path: str | os.PathLike[str]) -> BatchConfig:
    """Read and validate a `.json` or `.toml` batch config.

    Raises:
        BatchConfigError: the file is missing, unreadable, not JSON/TOML, or fails
            validation; each problem names the field path and its line.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchConfigError([ConfigProblem(file=str(source), message=_why(exc))]) from None
    return parse_config(text, suffix=source.suffix, file=source)


def parse_config(text: str, *, suffix: str, file: Path | None = None) -> BatchConfig:
    """Validate config `text` in the format `suffix` names (`.json` or `.toml`).

    Raises:
        BatchConfigError: not that format, or invalid (each problem with its line).
    """
    where = None if file is None else str(file)
    data = _decode(text, suffix, where)
    try:
        config = BatchConfig.model_validate(data)
    except ValidationError as exc:
        lines = (json_lines if suffix == ".json" else toml_lines)(text)
        raise BatchConfigError(_problems(exc, data, lines, where)) from None
    config._path = None if file is None else file.resolve()
    return config


def _decode(text: str, suffix: str, where: str | None) -> Any:
    if suffix == ".json":
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            line = text.count("\n", 0, exc.pos) + 1
            message = f"invalid JSON: {exc.msg}"
            raise BatchConfigError(
                [ConfigProblem(file=where, line=line, message=message)]
            ) from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
            at = int(found[1]) if found else None
            message = f"invalid TOML: {exc}"
            raise BatchConfigError([ConfigProblem(file=where, line=at, message=message)]) from None
    message = f"unknown config format {suffix!r}; expected .json or .toml"
    raise BatchConfigError([ConfigProblem(file=where, message=message)])


def _problems(
    exc: ValidationError, data: Any, lines: Mapping[tuple[str | int, ...], int], where: str | None
) -> list[ConfigProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        path = _raw_path(data, err["loc"])
        line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
        message = err["msg"].removeprefix("Value error, ")
        problems.append(ConfigProblem(file=where, line=line, path=_dotted(path), message=message))
    return problems


def _raw_path(data: Any, loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """The error's location in the document, without pydantic's union tags."""
    path: list[str | int] = []
    node = data
    for part in loc:
        if _has(node, part):
            node = node[part]
        elif isinstance(node, dict) and node.get("kind") == part:
            continue  # the tag of a discriminated union: not in the document
        elif isinstance(node, str) and part == "kind":
            continue  # a string shorthand such as `executor = "ray"`
        else:
            path.append(part)  # a missing field: named, though absent
            node = None
            continue
        path.append(part)
    return tuple(path)


def _has(node: Any, part: str | int) -> bool:
    if isinstance(node, list):
        return isinstance(part, int) and 0 <= part < len(node)
    return isinstance(node, dict) and part in node


def _dotted(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return f"not UTF-8 text: {exc}"
