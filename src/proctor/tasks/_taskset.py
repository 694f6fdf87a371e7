"""`Taskset`: a named, ordered collection of `Task` rows, and its file formats."""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

import orjson
from pydantic import ValidationError

from .._errors import SourceError, TasksetError
from .._loader import load_module, task_modules
from ..records import Task

if TYPE_CHECKING:
    from ..agents import Agent, Run
    from ..engine import Job, RayExecutor, RunSink, Timeouts
    from ..proxy import InterceptionProxy, ModelLimits
    from ..runtimes import RuntimeLike

__all__ = ["Taskset"]

_Loaded = tuple[str | None, list[Task]]  # (name the file gives itself, rows)


class Taskset:
    """A named, ordered collection of `Task` rows with unique slugs.

    Index it by slug (`ts["add-1a2b3c4d"]`) or by position (`ts[0]`).

    Args:
        name: Name of the taskset, used in job records.
        tasks: The rows, in run order.

    Raises:
        TasksetError: two rows share a slug.
        TypeError: an item is not a `Task`.
    """

    def __init__(self, name: str, tasks: Iterable[Task] = ()) -> None:
        self._name = name
        self._tasks = tuple(tasks)
        self._index: dict[str, Task] = {}
        for task in self._tasks:
            if not isinstance(task, Task):
                raise TypeError(f"taskset {name!r}: expected Task, got {type(task).__name__}")
            if task.slug in self._index:
                raise TasksetError(f"taskset {name!r}: duplicate slug {task.slug!r}")
            self._index[task.slug] = task

    @property
    def name(self) -> str:
        """Name of the taskset."""
        return self._name

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The rows, in order."""
        return self._tasks

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __getitem__(self, key: str | int) -> Task:
        if isinstance(key, str):
            try:
                return self._index[key]
            except KeyError:
                raise KeyError(self._missing([key])) from None
        return self._tasks[key]

    def __contains__(self, slug: object) -> bool:
        return isinstance(slug, str) and slug in self._index

    def __repr__(self) -> str:
        return f"<Taskset {self._name!r}: {len(self)} tasks>"

    def __eq__(self, other: object) -> bool:
        """Equal when the names and the rows, in order, are equal."""
        if not isinstance(other, Taskset):
            return NotImplemented
        return self._name == other._name and self._tasks == other._tasks

    __hash__ = None  # type: ignore[assignment]  # equal by value, and rows are mutable

    def filter(self, slugs: Iterable[str]) -> Taskset:
        """The rows whose slug is in `slugs`, in this taskset's order.

        Args:
            slugs: Slugs to keep; a single string counts as one slug.

        Raises:
            TasksetError: a slug is not in this taskset (a typo must not run nothing).
        """
        keep = self._known(slugs)
        return Taskset(self._name, (t for t in self._tasks if t.slug in keep))

    def exclude(self, slugs: Iterable[str]) -> Taskset:
        """The rows whose slug is not in `slugs`, in this taskset's order.

        Args:
            slugs: Slugs to drop; a single string counts as one slug.

        Raises:
            TasksetError: a slug is not in this taskset.
        """
        drop = self._known(slugs)
        return Taskset(self._name, (t for t in self._tasks if t.slug not in drop))

    def _known(self, slugs: Iterable[str]) -> set[str]:
        wanted = [slugs] if isinstance(slugs, str) else list(slugs)
        unknown = [s for s in dict.fromkeys(wanted) if s not in self._index]
        if unknown:
            raise TasksetError(self._missing(unknown))
        return set(wanted)

    def _missing(self, slugs: Sequence[str]) -> str:
        what = ("task " if len(slugs) == 1 else "tasks ") + ", ".join(map(repr, slugs))
        close = difflib.get_close_matches(slugs[0], self._index, n=3)
        if close:
            hint = f"did you mean {', '.join(map(repr, close))}?"
        elif self._index:
            known = ", ".join(map(repr, list(self._index)[:5]))
            hint = f"known: {known}" + (f", ... ({len(self)} in all)" if len(self) > 5 else "")
        else:
            hint = "it is empty"
        return f"no {what} in taskset {self._name!r}; {hint}"

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], name: str | None = None, *, limit: int | None = None
    ) -> Taskset:
        """Load a taskset from `.json`, `.jsonl`, a `.py` source or a folder.

        A foreign task source (a Harbor task directory or a folder of them, an OpenEnv
        environment folder: `proctor.importers.detect`) gives its rows. A `.json`
        file holds an array of rows, one row object (as HUD reads it) or
        `{"name": ..., "tasks": [...]}`; a `.jsonl` file one row per line. Rows are
        HUD's (see `Task`): HUD's fields, slugs and unknown keys all carry over. A
        `.py` file (or a package: a folder with an `__init__.py`) contributes every
        `Task`, `Taskset` and list or tuple of `Task` among its module globals, in
        definition order; an equal row seen twice counts once. Any other folder names
        its task files: `tasks.py` and `tasks_*.py`, in name order, else its one
        `tasks.json` or `tasks.jsonl`. No other file in the folder is imported
        (helpers, the environment, scripts run only when a task file imports them);
        `source_files` says which files a source reads.

        Args:
            path: The file or directory.
            name: Overrides the name; defaults to the name the file gives (a JSON
                object's `name`, or a module's only `Taskset`), else the file stem.
            limit: At most this many rows, the first ones (a foreign source that
                generates tasks without end, e.g. a verifiers taskset, needs one).

        Raises:
            TasksetError: the file is missing, unreadable or malformed, a folder
                holds no task file, or a foreign source cannot be loaded here (no
                interpreter for it); the message names the file and, where known, the line.
        """
        source = Path(path)
        imported = _imported(source, limit)
        if imported is not None:
            return cls(name or source.resolve().name, imported)
        files = cls.source_files(source)
        if files[0].suffix == ".py":
            given, tasks = _load_py(source if source.is_dir() and _is_package(source) else files)
        else:
            given, tasks = _LOADERS[files[0].suffix](files[0])
        stem = source.resolve().name if source.is_dir() else source.stem
        try:
            return cls(name or given or stem, tasks if limit is None else tasks[:limit])
        except TasksetError as exc:
            raise TasksetError(f"{source}: {exc}") from None

    @staticmethod
    def source_files(path: str | os.PathLike[str]) -> list[Path]:
        """The files `from_file(path)` reads, without reading them.

        The path itself for a file; a package's `__init__.py`; for any other folder its
        task files (`tasks.py`, then `tasks_*.py` in name order), else its one
        `tasks.json` or `tasks.jsonl`. Modules those files import are not listed.

        Raises:
            TasksetError: the path is missing, has an unknown format, or is a folder
                with no task file (or with both `tasks.json` and `tasks.jsonl`).
        """
        source = Path(path)
        if not source.exists():
            raise TasksetError(f"{source}: no such file")
        if source.is_dir():
            return _folder_files(source)
        if source.suffix not in _LOADERS:
            raise TasksetError(
                f"{source}: unknown taskset format {source.suffix!r}; "
                "expected .json, .jsonl, .py or a directory"
            )
        return [source]

    def to_file(self, path: str | os.PathLike[str]) -> None:
        """Write the rows atomically as a `.json` array (indented) or `.jsonl` lines.

        Byte for byte what HUD's `Taskset.to_file` writes for the same rows (Python's
        `json`, ASCII, null fields left out), so a HUD task file comes back unchanged.
        The name is not stored: `Taskset.from_file(path, name=ts.name) == ts`.

        Raises:
            TasksetError: the suffix is neither `.json` nor `.jsonl`.
            OSError: the file could not be written.
        """
        target = Path(path)
        if target.suffix not in (".json", ".jsonl"):
            raise TasksetError(f"{target}: cannot write {target.suffix!r}; use .json or .jsonl")
        write_atomic(target, dump_rows(self._tasks, target.suffix).encode())

    async def run(
        self,
        agent: Agent,
        *,
        runtime: RuntimeLike | None = None,
        group: int = 1,
        max_concurrent: int | None = None,
        job: Job | None = None,
        rollout_timeout: Timeouts | float | None = None,
        proxy: InterceptionProxy | None = None,
        limits: ModelLimits | None = None,
        executor: Literal["local", "ray"] | RayExecutor = "local",
        judge: InterceptionProxy | None = None,
        keep: Literal["runs", "summaries", "none"] = "runs",
        sink: RunSink | Callable[[Run], Any] | None = None,
    ) -> Job:
        """Run every row with `agent` and collect the results.

        A thin front for `proctor.engine.run_taskset`, which documents every option.
        For a large job, `sink` (a callable, or an object with an async `add(run)`)
        takes each run as its group ends, and `keep="summaries"` keeps a `RunSummary`
        per run instead of the run, `keep="none"` nothing but the job's statistics:
        memory then stays flat however many rollouts run.

        Returns:
            The `Job`: its statistics, and with `keep="runs"` (the default, for reading
            runs one by one) each `Run` and its summary, one per row and group member.
        """
        from ..engine import run_taskset  # on first run: reading rows needs no engine

        return await run_taskset(
            self,
            agent,
            runtime=runtime,
            group=group,
            max_concurrent=max_concurrent,
            job=job,
            rollout_timeout=rollout_timeout,
            proxy=proxy,
            limits=limits,
            executor=executor,
            judge=judge,
            keep=keep,
            sink=sink,
        )


def _imported(source: Path, limit: int | None) -> list[Task] | None:
    """The rows of a foreign task source (`proctor.importers.detect`), else None."""
    from ..importers import detect

    try:
        found = detect(source, limit=limit)
    except (ValueError, ImportError) as exc:
        raise TasksetError(f"{source}: {exc}") from None
    return None if found is None else found.rows


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TasksetError(f"{path}: {exc.strerror or exc}") from exc


def _load_jsonl(path: Path) -> _Loaded:
    rows: list[object] = []
    lines: list[int] = []
    for lineno, raw in enumerate(_read(path).split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            rows.append(_parse(raw))
        except json.JSONDecodeError as exc:
            raise TasksetError(
                f"{path}:{lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
            ) from exc
        lines.append(lineno)
    return None, _validate(path, rows, lines.__getitem__)


def _load_json(path: Path) -> _Loaded:
    data = _read(path)
    try:
        doc = _parse(data)
    except json.JSONDecodeError as exc:
        raise TasksetError(
            f"{path}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
        ) from exc
    if isinstance(doc, list):
        name, rows = None, doc
    elif _is_named(doc):
        name, rows = doc.get("name"), doc["tasks"]
    elif isinstance(doc, dict) and "tasks" not in doc:  # one bare task row, as HUD reads it
        first = len(data) - len(data.lstrip())
        return None, _validate(path, [doc], lambda _: 1 + data.count(b"\n", 0, first))
    else:
        raise TasksetError(
            f"{path}: expected a JSON array of tasks, one task object "
            f'or {{"name": str, "tasks": [...]}}'
        )
    # Row line numbers cost a second parse, so they are found only when reporting an error.
    starts = functools.cache(lambda: _row_lines(data.decode()))
    return name, _validate(path, rows, lambda i: starts()[i])


def _is_named(doc: object) -> TypeGuard[dict[str, Any]]:
    """`{"name": str, "tasks": [...]}`: proctor's named form (a task row has `env`)."""
    return (
        isinstance(doc, dict)
        and doc.keys() <= {"name", "tasks"}
        and isinstance(doc.get("name", ""), str)
        and isinstance(doc.get("tasks"), list)
    )


# Every digit read as "0", so a run of 19 digits is a plain substring test.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def _parse(data: bytes) -> Any:
    """JSON as Python's `json` reads it (what HUD writes), at orjson's speed when it can.

    orjson refuses NaN and Infinity and reads integers past 64 bits as floats; the
    standard library reads those exactly, so it takes over for them.

    Raises:
        json.JSONDecodeError: the bytes are not JSON.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        try:
            return json.loads(data)
        except (ValueError, RecursionError):  # not JSON at all: orjson says where
            raise exc from None
    if _LONG_RUN in data.translate(_DIGITS_AS_ZERO):
        with contextlib.suppress(RecursionError):  # nested past the limit: orjson's stands
            value = json.loads(data)
    return value


def _validate(path: Path, rows: Sequence[object], line_of: Callable[[int], int]) -> list[Task]:
    tasks: list[Task] = []
    first: dict[str, int] = {}
    for i, row in enumerate(rows):
        try:
            task = Task.model_validate(row)
        except ValidationError as exc:
            raise TasksetError(f"{path}:{line_of(i)}: invalid task: {_summary(exc)}") from exc
        if first.setdefault(task.slug, i) != i:
            raise TasksetError(
                f"{path}:{line_of(i)}: duplicate slug {task.slug!r} "
                f"(first on line {line_of(first[task.slug])})"
            )
        tasks.append(task)
    return tasks


def _summary(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, err['loc']))}: {err['msg']}" if err["loc"] else err["msg"]
        for err in exc.errors(include_url=False)
    )


def _row_lines(text: str) -> list[int]:
    """The line each row starts on, in a well-formed JSON taskset document."""
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\n\r":
            i += 1
        return i

    i = skip(0)
    if text[i] == "{":
        i = skip(i + 1)
        while True:
            key, i = decoder.raw_decode(text, i)
            i = skip(skip(i) + 1)  # past the colon
            if key == "tasks":
                break
            i = skip(decoder.raw_decode(text, i)[1])
            i = skip(i + 1)  # past the comma
    lines: list[int] = []
    line, pos = 1, 0
    i = skip(i + 1)  # past the bracket
    while text[i] != "]":
        line, pos = line + text.count("\n", pos, i), i
        lines.append(line)
        i = skip(decoder.raw_decode(text, i)[1])
        if text[i] == ",":
            i = skip(i + 1)
    return lines


def _load_py(source: Path | list[Path]) -> _Loaded:
    """Rows of a package (a folder `source`) or of the `.py` files listed."""
    try:
        modules = [load_module(p) for p in ([source] if isinstance(source, Path) else source)]
    except SourceError as exc:
        raise TasksetError(str(exc)) from exc
    found: list[Task] = []
    tasksets: list[Taskset] = []
    for module in modules:
        items = _module_items(module)
        if not items:
            raise TasksetError(f"{module.__file__}: defines no Task, Taskset or list of Task")
        for item in items:
            # A sibling import re-runs a module under its own name, so the same row or
            # taskset can come back as an equal copy rather than the same object.
            if isinstance(item, Taskset) and item not in tasksets:
                tasksets.append(item)
            found.extend(item)
    unique = _distinct(found)
    if len(tasksets) == 1 and len(unique) == len(tasksets[0]):
        return tasksets[0].name, list(tasksets[0])
    return None, unique


def _distinct(tasks: Iterable[Task]) -> list[Task]:
    unique: list[Task] = []
    first: dict[str, Task] = {}
    for task in tasks:
        seen = first.get(task.slug)
        if seen is None:
            first[task.slug] = task
            unique.append(task)
        elif seen != task:
            unique.append(task)  # a different row under a taken slug: Taskset reports it
    return unique


def _module_items(module: ModuleType) -> list[Taskset | Sequence[Task]]:
    items: list[Taskset | Sequence[Task]] = []
    for value in vars(module).values():
        if isinstance(value, Task):
            items.append([value])
        elif isinstance(value, Taskset) or (
            isinstance(value, list | tuple) and value and all(isinstance(v, Task) for v in value)
        ):
            items.append(value)
    return items


def _is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def _folder_files(path: Path) -> list[Path]:
    if _is_package(path):
        return [path / "__init__.py"]
    python = task_modules(path)
    if python:
        return python
    data = [p for p in (path / "tasks.json", path / "tasks.jsonl") if p.is_file()]
    if len(data) != 1:
        raise TasksetError(
            f"{path}: a folder source needs tasks.py or tasks_*.py, or exactly one of "
            "tasks.json, tasks.jsonl (no other file in it is imported; name a file to load it)"
        )
    return data


_LOADERS: dict[str, Callable[[Path], _Loaded]] = {
    ".json": _load_json,
    ".jsonl": _load_jsonl,
    ".py": _load_py,
}


def dump_rows(tasks: Iterable[Task], suffix: str) -> str:
    """The text of a `.json` or `.jsonl` task file holding `tasks`, as HUD writes it."""
    rows = [task.model_dump(mode="json", exclude_none=True) for task in tasks]
    if suffix == ".json":
        return json.dumps(rows, indent=2, default=str) + "\n"
    return "".join(json.dumps(row, default=str) + "\n" for row in rows)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one rename (a reader sees the old or the new file)."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644  # mkstemp creates 0600; a taskset file is meant to be shared
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
