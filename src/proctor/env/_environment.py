"""`Environment`: a named set of task templates, capabilities and lifecycle hooks."""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, overload

from .._errors import TemplateError
from ._mcp import McpHttpServer
from ._shell import ShellServer
from ._template import Template, TemplateFn
from ._types import Capability

__all__ = ["Environment", "registered"]

log = logging.getLogger("proctor.env")

Hook = Callable[[], Awaitable[Any] | Any]
H = TypeVar("H", bound=Hook)

_BY_NAME: weakref.WeakValueDictionary[str, Environment] = weakref.WeakValueDictionary()


def registered(name: str) -> Environment | None:
    """The live `Environment` of this name defined in this process, if any (latest wins)."""
    return _BY_NAME.get(name)


class Environment:
    """Where an agent acts: task templates plus the capabilities it may use.

    Args:
        name: the environment's name; `Task.env` rows refer to it.
        version: published in `hello`.
        capabilities: endpoints published to every session; hooks may add more.
    """

    def __init__(
        self, name: str, version: str = "0.1.0", capabilities: Iterable[Capability] = ()
    ) -> None:
        self.name = name
        self.version = version
        self.tasks: dict[str, Template] = {}
        self._capabilities: dict[str, Capability] = {}
        self._init_hooks: list[Hook] = []
        self._shutdown_hooks: list[Hook] = []
        for cap in capabilities:
            self.add_capability(cap)
        _BY_NAME[name] = self

    def __repr__(self) -> str:
        return f"<Environment {self.name} v{self.version}: {len(self.tasks)} templates>"

    @property
    def capabilities(self) -> list[Capability]:
        """Capabilities published in `hello`, in declaration order."""
        return list(self._capabilities.values())

    def add_capability(self, capability: Capability) -> None:
        """Declare a capability (e.g. from an initialize hook once its daemon is up).

        Raises:
            TemplateError: the name is already declared.
        """
        if capability.name in self._capabilities:
            raise TemplateError(f"{self.name}: duplicate capability {capability.name!r}")
        self._capabilities[capability.name] = capability

    def add_shell(
        self,
        name: str = "shell",
        *,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        shell: str | None = None,
        timeout: float = 120.0,
        max_output: int = 1024 * 1024,
    ) -> ShellServer:
        """Declare a `shell` capability: a `ShellServer` running commands in this substrate.

        An initialize hook starts the server on a Unix socket in a private (0700)
        directory and declares the capability (`unix:///.../shell.sock`); a shutdown hook
        withdraws it and stops the server (killing what it started). Only this process's
        uid can connect there; clients reach it only through `tunnel.open` on an
        authenticated control connection (`run.binding(name)`). Graders can run checks
        through the returned server's `run()`. Arguments are `ShellServer`'s.
        """
        server = ShellServer(cwd=cwd, env=env, shell=shell, timeout=timeout, max_output=max_output)

        async def start_shell() -> None:
            self.add_capability(Capability(name, "shell", await server.start()))

        async def stop_shell() -> None:
            self._capabilities.pop(name, None)
            await server.aclose()

        self.initialize(start_shell)
        self.shutdown(stop_shell)
        return server

    def add_mcp(self, server: Any, name: str = "mcp", *, path: str = "/mcp") -> None:
        """Declare an `mcp` capability serving `server` (an `mcp` SDK `MCPServer`).

        An initialize hook serves it over streamable HTTP on a Unix socket in a private
        (0700) directory and declares the capability (`http+unix://<socket path>/mcp`); a
        shutdown hook withdraws and stops it. Only this process's uid can connect there;
        clients reach it only through `tunnel.open` (`run.binding(name)`). Needs
        `pip install 'proctor[mcp]'`.
        """
        http = McpHttpServer(server, path=path)

        async def start_mcp() -> None:
            self.add_capability(Capability(name, "mcp", await http.start()))

        async def stop_mcp() -> None:
            self._capabilities.pop(name, None)
            await http.aclose()

        self.initialize(start_mcp)
        self.shutdown(stop_mcp)

    def capability(self, name: str) -> Capability:
        """The declared capability called `name` (KeyError if none)."""
        return self._capabilities[name]

    @overload
    def template(self, fn: TemplateFn, /) -> Template: ...
    @overload
    def template(
        self,
        fn: None = None,
        /,
        *,
        id: str | None = None,
        description: str = "",
        input: Any = None,
        returns: Any = None,
    ) -> Callable[[TemplateFn], Template]: ...

    def template(
        self,
        fn: TemplateFn | None = None,
        /,
        *,
        id: str | None = None,
        description: str = "",
        input: Any = None,
        returns: Any = None,
    ) -> Template | Callable[[TemplateFn], Template]:
        """Register a two-yield async generator as a task template.

        Usable bare (`@env.template`) or with options. The first yield is the prompt,
        the second the reward.

        Raises:
            TemplateError: duplicate id, or not an async generator function.
        """

        def register(f: TemplateFn) -> Template:
            tid = id or f.__name__
            if tid in self.tasks:
                raise TemplateError(f"{self.name}: duplicate template id {tid!r}")
            tpl = Template(
                self.name, f, id=tid, description=description, input=input, returns=returns
            )
            self.tasks[tid] = tpl
            return tpl

        return register(fn) if fn is not None else register

    def initialize(self, fn: H) -> H:
        """Register a hook run (in order) before the environment serves."""
        self._init_hooks.append(fn)
        return fn

    def shutdown(self, fn: H) -> H:
        """Register a hook run (in reverse order, always) when the environment stops."""
        self._shutdown_hooks.append(fn)
        return fn

    async def start(self) -> None:
        """Run the initialize hooks; if one fails, run the shutdown hooks and re-raise."""
        for hook in self._init_hooks:
            try:
                await _call(hook)
            except BaseException:
                await self.stop()
                raise

    async def stop(self) -> None:
        """Run every shutdown hook in reverse order; the first failure is raised after all."""
        first: BaseException | None = None
        for hook in reversed(self._shutdown_hooks):
            try:
                await _call(hook)
            except BaseException as exc:
                log.error(
                    "%s: shutdown hook %s failed: %r",
                    self.name,
                    getattr(hook, "__qualname__", hook),
                    exc,
                )
                first = first or exc
        if first is not None:
            raise first


async def _call(hook: Hook) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result
