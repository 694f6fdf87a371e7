"""`load_compose`: a Compose file as users write it, checked into a `ComposeFile`.

Only what a rollout's private project needs is taken; every error is one line naming
the file and the key (`compose.yaml: services.db.healthcheck.interval: ...`).

Kept: `image`, `build` (a context folder, or `context` and `dockerfile`), `command`,
`entrypoint` (a list, or a string split as a shell would), `environment` (a list of
`KEY=VALUE` or a mapping), `depends_on` (a list, or a mapping with `condition`),
`healthcheck`, `working_dir`, `user`, `volumes` (binds inside the file's folder, and
tmpfs), `stop_grace_period`, `stop_signal`. Ignored, harmless: `networks` (every service
joins the project's one private network), `ports` and `expose` (nothing is published;
services reach each other by name), `container_name`, `hostname`, `restart`, `labels`,
`platform`, `init`, `tty`, `stdin_open`, `version`, `name`, and `x-` extensions. Refused:
any other key (named volumes, `privileged`, `network_mode`, `cap_add`, ...).
`${NAME}` and `${NAME:-default}` are replaced from the variables given, `$$` is `$`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ComposeFile", "Healthcheck", "Service", "Volume", "load_compose"]

CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
IGNORED = frozenset(
    {"networks", "ports", "expose", "container_name", "hostname", "restart", "labels"}
    | {"platform", "init", "tty", "stdin_open"}
)
"""Service keys read and ignored (each is harmless in a private, unpublished project)."""
_KEYS = frozenset(
    {"image", "build", "command", "entrypoint", "environment", "depends_on", "healthcheck"}
    | {"working_dir", "user", "volumes", "stop_grace_period", "stop_signal"}
)
_TOP = frozenset({"services", "version", "name", "networks"})
_SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_VARIABLE = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_]\w*))")
_MAX_BYTES = 1 << 20
_MAX_NODES = 100_000  # values in the file, aliases counted each time (no alias bombs)


@dataclass(frozen=True, slots=True)
class Healthcheck:
    """A service's health test: `test` run in the container (`CMD-SHELL` through
    `/bin/sh -c`), every `interval` seconds, failing after `retries` in a row once
    `start_period` is over."""

    test: tuple[str, ...]
    interval: float = 1.0
    timeout: float = 30.0
    retries: int = 3
    start_period: float = 0.0


@dataclass(frozen=True, slots=True)
class Volume:
    """A bind mount (`source` an absolute folder or file of this machine) or a tmpfs
    (`source` None)."""

    target: str
    source: str | None = None
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class Service:
    """One service of a Compose file (paths absolute, durations in seconds)."""

    name: str
    image: str | None = None
    build_context: str | None = None
    dockerfile: str | None = None
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    depends_on: Mapping[str, str] = field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    working_dir: str | None = None
    user: str | None = None
    volumes: tuple[Volume, ...] = ()
    stop_grace_period: float | None = None
    stop_signal: str | None = None


@dataclass(frozen=True, slots=True)
class ComposeFile:
    """A checked Compose file: its services in an order that starts each after what
    it depends on (`main` last), and notes on what was ignored."""

    path: str
    main: str
    services: Mapping[str, Service]
    order: tuple[str, ...]
    notes: tuple[str, ...] = ()


class _Problem(ValueError):
    """One thing wrong, at one key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(_one_line(f"{key}: {message}"))


def _one_line(text: str) -> str:
    """`text` with what is not printable (a newline in a key, say) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def load_compose(
    path: str | os.PathLike[str], *, main: str = "main", variables: Mapping[str, str] = {}
) -> ComposeFile:
    """Read and check the Compose file at `path`.

    Args:
        path: the file (`compose.yaml`, `docker-compose.yaml`, ...).
        main: the service that serves the environment (it starts last, and nothing
            may depend on it).
        variables: values for `${NAME}` in the file (none by default: this process's
            environment is never read).

    Raises:
        ValueError: the file cannot be read, is not YAML, or a key is wrong; the one
            line names the file and the key.
    """
    file = Path(path).absolute()
    try:
        with file.open("rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(_one_line(f"{file}: cannot read: {exc.strerror or exc}")) from None
    if len(data) > _MAX_BYTES:
        raise ValueError(_one_line(f"{file}: larger than {_MAX_BYTES} bytes"))
    try:
        return parse_compose(data.decode(), file, main=main, variables=variables)
    except UnicodeDecodeError:
        raise ValueError(_one_line(f"{file}: not UTF-8 text")) from None
    except _Problem as exc:
        raise ValueError(_one_line(f"{file}: {exc}")) from None


def parse_compose(
    text: str, file: Path, *, main: str = "main", variables: Mapping[str, str] = {}
) -> ComposeFile:
    """`load_compose` on text already read (`file` places relative paths).

    Raises:
        ValueError: as `load_compose`, without the file's name.
    """
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise _Problem("yaml", "reading Compose files needs PyYAML: pip install pyyaml") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise _Problem("yaml", f"not valid YAML{where}") from None
    except RecursionError:
        raise _Problem("yaml", "nested too deeply") from None
    except Exception as exc:  # a scalar its constructor refused, such as a bad date
        raise _Problem("yaml", f"not valid YAML: {exc}") from None
    try:
        doc = _interpolate(doc, variables, "", [_MAX_NODES])
    except RecursionError:
        raise _Problem("yaml", "nested too deeply") from None
    if not isinstance(doc, dict):
        raise _Problem("(top)", f"a mapping with 'services', not {_kind(doc)}")
    notes: list[str] = []
    for key in doc:
        if not isinstance(key, str) or (key not in _TOP and not key.startswith("x-")):
            hint = " (named volumes outlive a rollout)" if key == "volumes" else ""
            raise _Problem(str(key), f"not supported{hint}")
    raw = doc.get("services")
    if not isinstance(raw, dict) or not raw:
        raise _Problem("services", f"a mapping of one or more services, not {_kind(raw)}")
    services: dict[str, Service] = {}
    for name, body in raw.items():
        if not isinstance(name, str) or not _SERVICE_NAME.match(name):
            raise _Problem(f"services.{name}", "a service name is letters, digits, '_.-'")
        services[name] = _service(name, body, file.parent, notes, main=name == main)
    if main not in services:
        raise _Problem("services", f"no {main!r} service (the one that serves the environment)")
    order = _order(services, main)
    return ComposeFile(str(file), main, services, order, tuple(notes))


def _service(name: str, body: Any, folder: Path, notes: list[str], *, main: bool) -> Service:
    """One service, checked (`main` may leave its image to the runtime or the task)."""
    at = f"services.{name}"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise _Problem(at, f"a mapping, not {_kind(body)}")
    fields: dict[str, Any] = {"name": name}
    for key, value in body.items():
        where = f"{at}.{key}"
        if not isinstance(key, str):
            raise _Problem(where, "not supported")
        if key in IGNORED or key.startswith("x-"):
            if key in ("ports", "expose"):
                notes.append(
                    f"{where} ignored: services reach each other by name, nothing is published"
                )
            continue
        if key not in _KEYS:
            raise _Problem(where, "not supported")
        if key == "image":
            fields["image"] = _string(value, where)
        elif key == "build":
            fields["build_context"], fields["dockerfile"] = _build(value, where, folder)
        elif key in ("command", "entrypoint"):
            fields[key] = _argv(value, where)
        elif key == "environment":
            fields["environment"] = _environment(value, where)
        elif key == "depends_on":
            fields["depends_on"] = _depends(value, where)
        elif key == "healthcheck":
            fields["healthcheck"] = _healthcheck(value, where)
        elif key == "volumes":
            fields["volumes"] = tuple(
                _volume(v, f"{where}[{i}]", folder) for i, v in _items(value, where)
            )
        elif key == "stop_grace_period":
            fields["stop_grace_period"] = _duration(value, where)
        else:  # working_dir, user, stop_signal
            fields[key] = _string(value, where)
    if fields.get("image") is None and fields.get("build_context") is None and not main:
        raise _Problem(at, "needs an image or a build")
    if fields.get("working_dir") and not fields["working_dir"].startswith("/"):
        raise _Problem(f"{at}.working_dir", "must be an absolute path")
    return Service(**fields)


def _build(value: Any, at: str, folder: Path) -> tuple[str, str | None]:
    if isinstance(value, str):
        value = {"context": value}
    if not isinstance(value, dict):
        raise _Problem(at, f"a folder or a mapping with 'context', not {_kind(value)}")
    for key in value:
        if key not in ("context", "dockerfile"):
            raise _Problem(f"{at}.{key}", "not supported (only context and dockerfile)")
    context = _inside(_string(value.get("context", "."), f"{at}.context"), folder, f"{at}.context")
    if not os.path.isdir(context):
        raise _Problem(f"{at}.context", f"{context} is not a folder")
    dockerfile = value.get("dockerfile")
    if dockerfile is None:
        return context, None
    path = _inside(_string(dockerfile, f"{at}.dockerfile"), Path(context), f"{at}.dockerfile")
    if not os.path.isfile(path):
        raise _Problem(f"{at}.dockerfile", f"{path} is not a file")
    return context, path


def _argv(value: Any, at: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise _Problem(at, f"cannot split: {exc}") from None
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return tuple(str(v) for v in value)
    raise _Problem(at, f"a string or a list of strings, not {_kind(value)}")


def _environment(value: Any, at: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise _Problem(f"{at}[{i}]", f"KEY=VALUE, not {_kind(item)}")
            key, sep, val = item.partition("=")
            if sep:
                out[_env_key(key, f"{at}[{i}]")] = val
            else:
                _env_key(key, f"{at}[{i}]")  # KEY alone: a host variable, not passed
        return out
    if isinstance(value, dict):
        for key, val in value.items():
            name = _env_key(key, f"{at}.{key}")
            if val is None:
                continue  # a host variable: not passed
            if isinstance(val, dict | list):
                raise _Problem(f"{at}.{key}", f"a string or number, not {_kind(val)}")
            out[name] = _scalar(val)
        return out
    raise _Problem(at, f"a list of KEY=VALUE or a mapping, not {_kind(value)}")


def _env_key(key: Any, at: str) -> str:
    if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key):
        raise _Problem(at, f"not a variable name: {key!r}")
    return key


def _depends(value: Any, at: str) -> dict[str, str]:
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise _Problem(at, "a list of service names")
        return dict.fromkeys(value, "service_started")
    if not isinstance(value, dict):
        raise _Problem(at, f"a list or a mapping of services, not {_kind(value)}")
    out = {}
    for name, spec in value.items():
        where = f"{at}.{name}"
        if not isinstance(name, str):
            raise _Problem(where, "not a service name")
        spec = spec or {}
        if not isinstance(spec, dict):
            raise _Problem(where, f"a mapping with 'condition', not {_kind(spec)}")
        for key in spec:
            if key not in ("condition", "required", "restart"):
                raise _Problem(f"{where}.{key}", "not supported")
        condition = spec.get("condition", "service_started")
        if condition not in CONDITIONS:
            raise _Problem(
                f"{where}.condition", f"one of {', '.join(CONDITIONS)}, not {condition!r}"
            )
        out[name] = condition
    return out


def _healthcheck(value: Any, at: str) -> Healthcheck | None:
    if not isinstance(value, dict):
        raise _Problem(at, f"a mapping, not {_kind(value)}")
    for key in value:
        if key not in ("test", "interval", "timeout", "retries", "start_period", "disable"):
            raise _Problem(f"{at}.{key}", "not supported")
    if value.get("disable") is True:
        return None
    test = value.get("test")
    if isinstance(test, str):
        argv: tuple[str, ...] = ("/bin/sh", "-c", test)
    elif isinstance(test, list) and test and all(isinstance(t, str) for t in test):
        if test[0] == "NONE":
            return None
        if test[0] == "CMD" and len(test) > 1:
            argv = tuple(test[1:])
        elif test[0] == "CMD-SHELL" and len(test) == 2:
            argv = ("/bin/sh", "-c", test[1])
        else:
            raise _Problem(f"{at}.test", "['CMD', ...], ['CMD-SHELL', '...'] or ['NONE']")
    else:
        raise _Problem(f"{at}.test", f"a string or a list, not {_kind(test)}")
    retries = value.get("retries", 3)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 < retries <= 1000:
        raise _Problem(f"{at}.retries", f"an integer from 1 to 1000, not {retries!r}")
    times = {
        k: _duration(value[k], f"{at}.{k}")
        for k in ("interval", "timeout", "start_period")
        if k in value
    }
    for key in ("interval", "timeout"):
        if key in times and times[key] <= 0:
            raise _Problem(f"{at}.{key}", "must be more than 0")
    return Healthcheck(argv, retries=retries, **times)


def _volume(value: Any, at: str, folder: Path) -> Volume:
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise _Problem(at, f"SOURCE:TARGET[:ro|rw] (a bind mount), not {value!r}")
        source, target = parts[0], parts[1]
        read_only = len(parts) == 3 and parts[2] == "ro"
        if not source.startswith((".", "/", "~")):
            raise _Problem(at, f"{source!r} is a named volume: only binds (./path) are supported")
        return Volume(_target(target, at), _bind(source, at, folder), read_only)
    if not isinstance(value, dict):
        raise _Problem(at, f"a string or a mapping, not {_kind(value)}")
    for key in value:
        if key not in ("type", "source", "target", "read_only", "tmpfs"):
            raise _Problem(f"{at}.{key}", "not supported")
    kind, target = value.get("type"), _target(value.get("target"), f"{at}.target")
    read_only = value.get("read_only", False)
    if not isinstance(read_only, bool):
        raise _Problem(f"{at}.read_only", f"true or false, not {read_only!r}")
    if kind == "tmpfs":
        return Volume(target, None, read_only)
    if kind != "bind":
        raise _Problem(f"{at}.type", f"'bind' or 'tmpfs', not {kind!r}")
    source = _string(value.get("source"), f"{at}.source")
    return Volume(target, _bind(source, f"{at}.source", folder), read_only)


def _bind(source: str, at: str, folder: Path) -> str:
    path = _inside(source, folder, at)
    if not os.path.exists(path):
        raise _Problem(at, f"{path} does not exist")
    return path


def _inside(path: str, folder: Path, at: str) -> str:
    """`path` resolved against `folder` (links followed), refused outside it."""
    if path.startswith("~"):
        raise _Problem(at, f"{path!r}: a path outside the project's folder is refused")
    root = folder.resolve()
    resolved = (folder / path).resolve()
    if resolved != root and root not in resolved.parents:
        raise _Problem(at, f"{path!r} is outside the project's folder {root}")
    return str(resolved)


def _target(value: Any, at: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or value == "/":
        raise _Problem(at, f"an absolute path in the container, not {value!r}")
    return value


def _duration(value: Any, at: str) -> float:
    """Seconds from a number or a Compose duration such as `1m30s` or `500ms`."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
        return float(value)
    if isinstance(value, str) and value and _DURATION.sub("", value) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(value))
        if seconds < 1e9:
            return seconds
    raise _Problem(at, f"a duration such as '5s' or '1m30s', not {value!r}")


def _order(services: Mapping[str, Service], main: str) -> tuple[str, ...]:
    """The services so that each comes after what it depends on, `main` last."""
    for name, service in services.items():
        for dep in service.depends_on:
            if dep not in services:
                raise _Problem(f"services.{name}.depends_on", f"no service {dep!r}")
            if dep == main:
                raise _Problem(
                    f"services.{name}.depends_on", f"{main!r} starts last: nothing may depend on it"
                )
            if service.depends_on[dep] == "service_healthy" and services[dep].healthcheck is None:
                raise _Problem(
                    f"services.{name}.depends_on.{dep}", f"service {dep!r} has no healthcheck"
                )
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise _Problem(f"services.{name}.depends_on", f"a cycle: {' -> '.join((*path, name))}")
        state[name] = 1
        for dep in services[name].depends_on:
            visit(dep, (*path, name))
        state[name] = 2
        order.append(name)

    for name in sorted(services, key=lambda n: n == main):
        visit(name, ())
    return tuple(order)


def _interpolate(value: Any, variables: Mapping[str, str], at: str, budget: list[int]) -> Any:
    """`value` with its variables replaced (a copy: aliases of YAML become values)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _Problem("yaml", f"more than {_MAX_NODES} values (aliases counted)")
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            if match[0] == "$$":
                return "$"
            name = match[1] or match[3]
            if name in variables:
                return variables[name]
            if match[2] is not None:
                return match[2]
            raise _Problem(at or "(top)", f"${{{name}}} is not set (and has no default)")

        return _VARIABLE.sub(replace, value)
    if isinstance(value, list):
        return [_interpolate(v, variables, f"{at}[{i}]", budget) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {
            k: _interpolate(v, variables, f"{at}.{k}" if at else str(k), budget)
            for k, v in value.items()
        }
    return value


def _items(value: Any, at: str) -> list[tuple[int, Any]]:
    if not isinstance(value, list):
        raise _Problem(at, f"a list, not {_kind(value)}")
    return list(enumerate(value))


def _string(value: Any, at: str) -> str:
    if isinstance(value, str) and value:
        return value
    raise _Problem(at, f"a non-empty string, not {_kind(value)}")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return repr(value[:40])
    if isinstance(value, dict):
        return "a mapping"
    return "a list" if isinstance(value, list) else type(value).__name__
