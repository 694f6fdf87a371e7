"""`Environment`: a named set of task templates, capabilities and lifecycle hooks."""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._errors import TemplateError
from ._rewards import INJECTABLE, GroupReward, Scoring, group_reward
from ._template import Template, TemplateFn
from ._types import Capability

if TYPE_CHECKING:  # each capability's server loads when it is added: a bare env stays light
    from ._browser import BrowserServer
    from ._desktop import DesktopServer
    from ._shell import ShellServer
    from ._user import UserServer

__all__ = ["Environment", "registered"]

log = logging.getLogger("proctor.env")

Hook = Callable[[], Awaitable[Any] | Any]
H = TypeVar("H", bound=Hook)
G = TypeVar("G", bound=Callable[..., Any])

_BY_NAME: dict[str, list[weakref.ref[Environment]]] = {}


def registered(name: str) -> Environment | None:
    """The live `Environment` of this name defined in this process, if any (latest wins;
    when the latest is gone, the one defined before it, if that one still lives)."""
    refs = _BY_NAME.get(name, [])
    while refs:
        env = refs[-1]()
        if env is not None:
            return env
        refs.pop()
    _BY_NAME.pop(name, None)
    return None


def _register(env: Environment) -> None:
    refs = _BY_NAME.setdefault(env.name, [])
    refs[:] = [ref for ref in refs if ref() is not None]
    refs.append(weakref.ref(env))


class Environment(Scoring):
    """Where an agent acts: task templates plus the capabilities it may use.

    `@env.reward`, `.metric`, `.setup` and `.finalize` register functions for every
    template (see `Scoring`); `@env.group_reward` one computed across a group's rollouts.

    Args:
        name: the environment's name; `Task.env` rows refer to it.
        version: published in `hello`.
        capabilities: endpoints published to every session; hooks may add more.
    """

    def __init__(
        self, name: str, version: str = "0.1.0", capabilities: Iterable[Capability] = ()
    ) -> None:
        super().__init__()
        self.name = name
        self.version = version
        self.tasks: dict[str, Template] = {}
        self.group_rewards: list[GroupReward] = []
        self._capabilities: dict[str, Capability] = {}
        self._servers: dict[str, Any] = {}  # capability name -> the object injected by name
        self._init_hooks: list[Hook] = []
        self._shutdown_hooks: list[Hook] = []
        for cap in capabilities:
            self.add_capability(cap)
        _register(self)

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
        self._servers.setdefault(capability.name, capability)

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
        from ._shell import ShellServer

        server = ShellServer(cwd=cwd, env=env, shell=shell, timeout=timeout, max_output=max_output)
        self._serve_capability(name, "shell", server)
        return server

    def add_desktop(
        self,
        width: int = 1280,
        height: int = 800,
        *,
        name: str = "desktop",
        window_manager: Sequence[str] | None = None,
        live_view: bool = False,
    ) -> DesktopServer:
        """Declare a `desktop` capability: an X display (Xvfb) with a computer/1 action server.

        An initialize hook starts the display and serves the actions on a Unix socket in
        a private (0700) directory (`unix:///.../desktop.sock`); a shutdown hook
        withdraws it and stops the display and every program started in it. Clients
        reach it only through `tunnel.open` (`run.binding(name)`, `DesktopClient`).
        Task code starts apps with the returned server's `launch()`. Arguments are
        `DesktopServer`'s; see `docs/computer.md`.
        """
        from ._desktop import DesktopServer

        desktop = DesktopServer(width, height, window_manager=window_manager, live_view=live_view)
        self._serve_capability(name, "computer", desktop)
        return desktop

    def add_browser(
        self,
        *,
        name: str = "browser",
        width: int = 1280,
        height: int = 800,
        headless: bool = True,
        allow_network: bool = False,
        live_view: bool = False,
        args: Sequence[str] = (),
    ) -> BrowserServer:
        """Declare a `cdp` capability: chromium with its own profile, driven over CDP or
        computer/1.

        An initialize hook launches chromium (CDP on a pipe only) and a bridge on a
        loopback port that admits only this process's uid; a shutdown hook withdraws it,
        kills chromium and removes its profile. Through `run.binding(name).url` the
        agent side gets Playwright's `connect_over_cdp` URL, which `DesktopClient` also
        takes (the same actions and frames as a desktop). Task code opens pages with the
        returned server's `goto()`. Arguments are `BrowserServer`'s; see
        `docs/computer.md`.
        """
        from ._browser import BrowserServer

        browser = BrowserServer(
            width,
            height,
            headless=headless,
            allow_network=allow_network,
            live_view=live_view,
            args=args,
        )
        self._serve_capability(name, "cdp", browser)
        return browser

    def add_user(self, name: str = "user") -> UserServer:
        """Declare a `user` capability: simulated users the agent talks to (user/1).

        Task code opens one dialogue per episode on the returned server (`open`) and
        publishes `dialogue.binding` with the prompt; the agent side talks through
        `UserClient(run.binding(name))`. See `docs/users.md`.
        """
        from ._user import UserServer

        server = UserServer()
        self._serve_capability(name, "user", server)
        return server

    def _serve_capability(self, name: str, protocol: str, server: Any) -> None:
        """Start `server` (`start() -> url`, `aclose()`) with the environment, as `name`."""
        self._servers[name] = server

        async def start_server() -> None:
            self.add_capability(Capability(name, protocol, await server.start()))

        async def stop_server() -> None:
            self._capabilities.pop(name, None)
            await server.aclose()

        self.initialize(start_server)
        self.shutdown(stop_server)

    def add_mcp(self, server: Any, name: str = "mcp", *, path: str = "/mcp") -> None:
        """Declare an `mcp` capability serving `server` (an `mcp` SDK `MCPServer`).

        An initialize hook serves it over streamable HTTP on a Unix socket in a private
        (0700) directory and declares the capability (`http+unix://<socket path>/mcp`); a
        shutdown hook withdraws and stops it. Only this process's uid can connect there;
        clients reach it only through `tunnel.open` (`run.binding(name)`). Needs
        `pip install 'proctor[mcp]'`.
        """
        from ._mcp import McpHttpServer

        self._serve_capability(name, "mcp", McpHttpServer(server, path=path))
        self._servers[name] = server  # task code gets the MCP server, not its HTTP front

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
        solution: Callable[..., Any] | None = None,
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
        solution: Callable[..., Any] | None = None,
    ) -> Template | Callable[[TemplateFn], Template]:
        """Register a two-yield async generator as a task template.

        Usable bare (`@env.template`) or with options. The first yield is the prompt,
        the second the reward (optional when rewards are registered). `solution` is
        the reference solution: injected like a reward, it returns the answer
        (`tasks.solve`).

        Raises:
            TemplateError: duplicate id, not an async generator function, or a
                solution taking a name that cannot be injected.
        """

        def register(f: TemplateFn) -> Template:
            tid = id or f.__name__
            if tid in self.tasks:
                raise TemplateError(f"{self.name}: duplicate template id {tid!r}")
            tpl = Template(
                self.name,
                f,
                id=tid,
                description=description,
                input=input,
                returns=returns,
                solution=solution,
                scope=self,
            )
            self.tasks[tid] = tpl
            return tpl

        return register(fn) if fn is not None else register

    @overload
    def group_reward(self, fn: G, /) -> G: ...
    @overload
    def group_reward(
        self, fn: None = None, /, *, weight: float = 0.0, name: str | None = None
    ) -> Callable[[G], G]: ...

    def group_reward(
        self, fn: G | None = None, /, *, weight: float = 0.0, name: str | None = None
    ) -> G | Callable[[G], G]:
        """Register `fn(runs: list[GroupMember]) -> list[float] | float`, run by the driver.

        It runs once every rollout of a group has ended (`evaluate_group`); one number
        goes to every member. With `weight > 0` its values also become grade subscores.

        Raises:
            TemplateError: not callable, a bad weight, or a name already registered.
        """

        def register(f: G) -> G:
            made = group_reward(f, weight=weight, name=name)
            if any(g.name == made.name for g in self.group_rewards):
                raise TemplateError(f"{self.name}: duplicate group reward {made.name!r}")
            self.group_rewards.append(made)
            return f

        return register(fn) if fn is not None else register

    def _known_names(self) -> frozenset[str]:
        return INJECTABLE | set(self._servers)

    def _taken_names(self) -> set[str]:
        return super()._taken_names().union(*(t._taken_names() for t in self.tasks.values()))

    def _objects(self) -> Mapping[str, Any]:
        return self._servers

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
