"""Load user Python sources (a file, a directory or `module:attr`) once per process."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._errors import SourceError

if TYPE_CHECKING:
    from .env import Environment

__all__ = [
    "find_environment",
    "load_agent",
    "load_module",
    "load_object",
    "source_modules",
    "task_modules",
]

_LOADED: dict[Path, ModuleType] = {}


def load_module(path: str | Path, *, compat: str | None = None) -> ModuleType:
    """Import a `.py` file (or a package directory) by path; cached by resolved path.

    The file's directory joins `sys.path` so sibling imports work. With `compat`
    (`"hud"`), the file and the modules of its folder import that framework's authoring
    names as proctor's (`proctor.compat.activate`).

    Raises:
        SourceError: the file is missing or raised while importing (file and line named).
        ValueError: an unknown `compat`.
    """
    resolved = Path(path).resolve()
    if resolved in _LOADED:
        return _LOADED[resolved]
    target = resolved / "__init__.py" if resolved.is_dir() else resolved
    if not target.is_file():
        raise SourceError(f"{path}: no such file")
    parent = str((resolved if resolved.is_dir() else resolved.parent).parent)
    folder = str(target.parent)
    for entry in (folder, parent):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    name = resolved.name if resolved.is_dir() else resolved.stem
    existing = sys.modules.get(name)
    if existing is not None:
        if Path(getattr(existing, "__file__", "") or "").resolve() == target:
            _LOADED[resolved] = existing  # already imported by a sibling's plain import
            return existing
        name = f"_proctor_src_{resolved.stem}_{len(_LOADED)}"
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise SourceError(f"{path}: not a Python source")
    module = importlib.util.module_from_spec(spec)
    if compat is not None:
        from .compat import activate

        module.__dict__["__builtins__"] = activate(compat, folder)
    sys.modules[name] = module
    shadowed = _shadowed_siblings(Path(folder))
    try:
        spec.loader.exec_module(module)
    except SourceError:
        raise
    except BaseException as exc:
        sys.modules.pop(name, None)
        raise SourceError(f"{_where(exc, target)}: {type(exc).__name__}: {exc}") from exc
    finally:
        _restore(shadowed)
    _LOADED[resolved] = module
    return module


def _shadowed_siblings(folder: Path) -> dict[str, ModuleType]:
    """Take out of `sys.modules` the modules named like a file of `folder` but loaded from
    elsewhere, so the source's sibling imports (`from env import ...`) get its own files.

    Two sources in different folders may each have an `env.py`: without this, the second
    source's `import env` returns the first one's module.
    """
    taken: dict[str, ModuleType] = {}
    for name, module in list(sys.modules.items()):
        if "." in name or name not in _sibling_names(folder):
            continue
        origin = getattr(module, "__file__", None)
        if origin and Path(origin).resolve().parent not in (folder, folder / name):
            taken[name] = sys.modules.pop(name)
    return taken


def _sibling_names(folder: Path) -> set[str]:
    """The top-level module names the files and packages of `folder` would import as."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return set()
    return {
        entry.stem if entry.suffix == ".py" else entry.name
        for entry in entries
        if entry.suffix == ".py" or (entry / "__init__.py").is_file()
    }


def _restore(taken: dict[str, ModuleType]) -> None:
    """Put back the modules `_shadowed_siblings` took out: the source keeps references to
    its own siblings, and code that imported the earlier ones still finds them by name."""
    for name, module in taken.items():
        sys.modules[name] = module


def task_modules(folder: Path) -> list[Path]:
    """A folder source's task files: `tasks.py`, then `tasks_*.py` in name order.

    The one rule for folders (`Taskset.from_file` uses it too): no other module in the
    folder is imported unless one of these imports it.
    """
    files = sorted(folder.glob("tasks_*.py"))
    if (folder / "tasks.py").is_file():
        files.insert(0, folder / "tasks.py")
    return files


def source_modules(source: str | Path, *, compat: str | None = None) -> list[ModuleType]:
    """The modules a source names: one file, a package, or a folder's task files
    (`task_modules`) and its `env.py`, never its other modules (`compat`: see
    `load_module`).

    Raises:
        SourceError: a folder with none of those files.
    """
    path = Path(source)
    if path.is_dir() and not (path / "__init__.py").exists():
        files = task_modules(path) + [p for p in (path / "env.py",) if p.is_file()]
        if not files:
            raise SourceError(
                f"{source}: a folder source needs tasks.py, tasks_*.py or env.py "
                "(no other module in it is imported; name a file to load it)"
            )
        return [load_module(p, compat=compat) for p in files]
    return [load_module(path, compat=compat)]


def load_object(spec: str) -> object:
    """Resolve `module:attr` or `path/to/file.py:attr` to the object it names.

    Raises:
        SourceError: the module cannot be imported or has no such attribute.
    """
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SourceError(f"{spec}: expected 'module:attr'")
    if module_name.endswith(".py") or "/" in module_name:
        module = load_module(module_name)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise SourceError(f"{spec}: cannot import {module_name}: {exc}") from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SourceError(f"{spec}: {module_name} has no attribute {attr!r}") from None
    return obj


def load_agent(
    spec: str,
    source: str,
    env_source: str | None = None,
    *,
    wrap: Callable[[Callable[..., Any]], object] | None = None,
) -> object:
    """The agent `spec` names: `module:attr`, `path.py:attr` or `builtin`.

    `builtin` is the `agent` global of the taskset source (else of `env_source`). A
    class is instantiated with no arguments. `proctor run --agent` and the batch plan
    both resolve agents here.

    A plain function of the prompt (`def solve(prompt)`, or an `async def` whose first
    parameter is named `prompt` or annotated `str`) is no agent: it is passed to `wrap`
    (`proctor.agent_from_fn`, which calls it with `run.prompt` and takes its return
    value as the answer) when given, else refused with a message saying so.

    Raises:
        SourceError: the module cannot be loaded, or nothing usable has that name.
    """
    if spec == "builtin":
        places = [p for p in dict.fromkeys((source, env_source or source)) if _is_python(p)]
        found = [
            (place, module.agent)
            for place in places
            for module in source_modules(place)
            if hasattr(module, "agent")
        ]
        if not found:
            raise SourceError(
                f"{' or '.join(places) or source} defines no 'agent'; "
                "pass --agent module:attr or path.py:attr"
            )
        place, obj = found[0]
        spec = f"{place}:agent"
    else:
        obj = load_object(spec)
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as exc:
            raise SourceError(f"{spec}: cannot instantiate {obj.__name__}(): {exc}") from None
    if not callable(obj):
        raise SourceError(
            f"{spec}: a {type(obj).__name__} is not an agent; need async __call__(run)"
        )
    if _takes_prompt(obj):
        if wrap is None:
            raise SourceError(
                f"{spec}: a function of the prompt, not an agent of the run; wrap it "
                "with proctor.agent_from_fn, or make it `async def (run)`"
            )
        return wrap(obj)
    call = obj if inspect.isroutine(obj) else type(obj).__call__
    if inspect.isfunction(call) and not inspect.iscoroutinefunction(call):
        raise SourceError(
            f"{spec}: not async; an agent is `async def (run)` or async __call__(run)"
        )
    return obj


def _takes_prompt(obj: object) -> bool:
    """A plain function of the prompt: sync and not taking a `run`, or async with a
    first parameter named `prompt` or annotated `str`."""
    if not inspect.isfunction(obj) and not inspect.ismethod(obj):
        return False
    params = list(inspect.signature(obj).parameters.values())
    first = params[0] if params else None
    if first is None:
        return False
    if first.name == "prompt" or first.annotation in (str, "str"):
        return True
    is_run = first.name == "run" or "Run" in str(first.annotation)
    return not inspect.iscoroutinefunction(obj) and not is_run


def _is_python(source: str) -> bool:
    path = Path(source)
    return path.suffix == ".py" or path.is_dir() or not path.exists()


def _where(exc: BaseException, target: Path) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{exc.filename or target}:{exc.lineno}"
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(frame.filename).resolve() == target:
            return f"{target}:{frame.lineno}"
    return str(target)


def find_environment(
    source: str | Path, name: str | None = None, *, compat: str | None = None
) -> Environment:
    """The `Environment` defined in a source file or folder (by name when several);
    `compat="hud"` loads a source written against HUD (see `load_module`).

    Raises:
        SourceError: the source fails to load, or holds no (or no such) environment.
    """
    from .env import Environment

    envs: dict[str, Environment] = {}
    for module in source_modules(source, compat=compat):
        for value in vars(module).values():
            if isinstance(value, Environment):
                envs.setdefault(value.name, value)
    if name is not None:
        if name not in envs:
            raise SourceError(
                f"{source}: no environment named {name!r} (found: {', '.join(envs) or 'none'})"
            )
        return envs[name]
    if len(envs) != 1:
        found = ", ".join(envs) or "none"
        raise SourceError(f"{source}: expected one Environment, found {found}; pass --env NAME")
    return next(iter(envs.values()))
