"""Imports go down the layers only, and across packages through their exports only.

The layers are the diagram in ARCHITECTURE.md, written once here. Every `import` in
every module under src/proctor counts: at module level, inside functions, and under
`TYPE_CHECKING`. A module may import its own package and any layer below it, never one
above, and never a module that does not exist. From another package it takes only what
that package exports (its `__init__.py`'s `__all__`; a leaf module's `__all__`), never a
private module or name of it, save the few friendships in `FRIENDS`.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import proctor

# Lowest first. A top-level module (`_errors`) or package (`env`) per entry; `serve` is
# the `python -m proctor.serve` command over `channel`, `<root>` is `proctor/__init__`.
LAYERS = [
    "_public",
    "_errors",
    "_usererror",
    "_urls",
    "_environ",
    "_uids",
    "_peer",
    "_tempdirs",
    "_nofollow",
    "_reads",
    "_resource",
    "_loop",
    "_http",
    "records",
    "store",
    "env",
    "compat",
    "_loader",
    "channel",
    "serve",
    "runtimes",
    "models",
    "proxy",
    "agents",
    "engine",
    "importers",
    "tasks",
    "batch",
    "samples",
    "view",
    "cli",
    "testing",
    "<root>",
]
RANK = {name: i for i, name in enumerate(LAYERS)}
SRC = Path(proctor.__file__).parent

# Deliberate friendships: (importing unit, private module it may take any name from).
# Each shares another package's internals on purpose; keep this list short, say why.
FRIENDS = {
    # the command `python -m proctor.serve` is the public name of channel's entry point
    ("serve", "proctor.channel._serve"),
    # the proxy retries and parses upstream turns with the model layer's own machinery
    ("proxy", "proctor.models._retry"),
    ("proxy", "proctor.models._wire"),
    # ... and speaks chat to a Bedrock Converse upstream through its translation
    ("proxy", "proctor.models._bedrock_chat"),
    # shipped test helpers: the channel's in-memory transport, and a raw dial that
    # checks whether a server still accepts connections
    ("testing", "proctor.channel._memory"),
    ("testing", "proctor.channel._client"),
    # HarborRuntime is a container runtime with a task's own image
    ("importers", "proctor.runtimes._container"),
    ("importers", "proctor.runtimes._image"),
    # the batch plan checks a config by the runtimes' and model layer's own rules before
    # anything launches; the reconciler finds a batch's Ray actors by their names
    ("batch", "proctor.models._names"),
    ("batch", "proctor.runtimes._ray"),
    ("batch", "proctor.runtimes._sandbox_limits"),
    ("batch", "proctor.runtimes._sandbox_host"),
    # the Ray executor joins the cluster and places its actors as RayRuntime does
    ("engine", "proctor.runtimes._ray"),
}


@dataclass(frozen=True)
class Import:
    """One name (or module) a module imports: `from <module> import <name>`."""

    line: int
    module: str  # absolute, e.g. proctor.batch._store
    name: str | None  # None for `import module`


def _unit(module: str) -> str:
    """`proctor.env._shell` -> `env`; `proctor` -> `<root>`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _module_name(path: Path) -> tuple[str, bool]:
    rel = path.relative_to(SRC.parent).with_suffix("")
    is_package = path.name == "__init__.py"
    parts = rel.parts[:-1] if is_package else rel.parts
    return ".".join(parts), is_package


def _names(name: str, is_package: bool, text: str) -> list[Import]:
    """Every proctor import in module `name`, nested ones too, one per imported name."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found += [Import(node.lineno, target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name, None) for alias in node.names]
    # `from proctor import __version__` reads metadata, not code: no layer, no reach
    return [
        i
        for i in found
        if i.module.split(".")[0] == "proctor" and not (i.name or "").startswith("__")
    ]


def _imports(name: str, is_package: bool, text: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every proctor import in module `name`, nested too."""
    found: list[tuple[int, str]] = []
    for i in _names(name, is_package, text):
        if i.module == "proctor" and i.name:  # `from .. import serve` names a module
            entry = (i.line, f"proctor.{i.name}")
        else:
            entry = (i.line, i.module)
        if entry not in found:
            found.append(entry)
    return found


def _path(module: str) -> Path | None:
    """The file of module `proctor.a.b` (a package's `__init__.py`), if there is one."""
    base = SRC.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _exports(module: str) -> frozenset[str]:
    """The names `module` lists in its `__all__` (the root: its lazy table); none without."""
    path = _path(module)
    for node in ast.parse(path.read_text()).body if path else []:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in ("__all__", "_EXPORTS") for t in targets):
                return frozenset(ast.literal_eval(node.value) if node.value else [])
    return frozenset()


def _is_private(module: str) -> bool:
    """A module below its unit whose path has a `_part` (`proctor.batch._store`)."""
    return any(part.startswith("_") for part in module.split(".")[2:])


def _reach(here: str, i: Import) -> str | None:
    """Why import `i` in unit `here` takes what its package does not export, or None."""
    if _unit(i.module) == here:
        return None
    if _is_private(i.module):
        return f"private module {i.module}"
    if i.name is None:
        return None
    if _path(f"{i.module}.{i.name}") is not None:  # `from proctor.x import module`
        if i.name.startswith("_") and i.module != "proctor":
            return f"private module {i.module}.{i.name}"
        return None
    if i.name not in _exports(i.module):
        return f"{i.name} is not in {i.module}.__all__"
    return None


def _sources() -> list[tuple[Path, str, bool]]:
    return [(path, *_module_name(path)) for path in sorted(SRC.rglob("*.py"))]


def _friend_key(here: str, i: Import) -> tuple[str, str]:
    """(unit, private module) of an import: `from proctor.x import _y` takes `proctor.x._y`."""
    if _is_private(i.module) or i.name is None or not i.name.startswith("_"):
        return here, i.module
    return here, f"{i.module}.{i.name}"


def reaches() -> list[str]:
    """`file:line: name from module (why)` for every unexported name taken across units."""
    problems = []
    for path, name, is_package in _sources():
        here = _unit(name)
        for i in _names(name, is_package, path.read_text()):
            why = _reach(here, i)
            if why and _friend_key(here, i) not in FRIENDS:
                where = path.relative_to(SRC.parent)
                problems.append(f"{where}:{i.line}: {i.name or i.module} from {i.module} ({why})")
    return problems


def _layer_problem(here: str, target: str) -> str | None:
    """Why unit `here` may not import module `target`, or None."""
    there = _unit(target)
    if there not in RANK or _path(target) is None:
        return f"{here} imports {target}, which is no module"
    if there != here and RANK[there] > RANK[here]:
        return f"{here} imports {target} (layer {there})"
    return None


def _upward() -> list[str]:
    problems = []
    for path, name, is_package in _sources():
        for line, target in _imports(name, is_package, path.read_text()):
            problem = _layer_problem(_unit(name), target)
            if problem:
                problems.append(f"{path.relative_to(SRC.parent)}:{line}: {problem}")
    return problems


def test_every_package_has_a_layer_once() -> None:
    units = {_unit(name) for _, name, _ in _sources()}
    assert units - set(LAYERS) == set(), "place each new package in LAYERS (and ARCHITECTURE.md)"
    assert len(LAYERS) == len(RANK), "a layer is listed twice"


def test_no_import_goes_up_a_layer_or_nowhere() -> None:
    assert _upward() == []


def test_no_import_takes_what_a_package_does_not_export() -> None:
    assert reaches() == []


def test_every_friendship_is_still_used() -> None:
    used = {
        _friend_key(_unit(name), i)
        for path, name, is_package in _sources()
        for i in _names(name, is_package, path.read_text())
    }
    assert FRIENDS - used == set(), "a friendship no import needs any more: drop it"


def test_the_layer_check_sees_nested_and_relative_imports() -> None:
    text = "def f():\n    from ..engine import rollout\n    from .. import serve\n"
    assert _imports("proctor.env._probe", False, text) == [
        (2, "proctor.engine"),
        (3, "proctor.serve"),
    ]


def test_the_layer_check_refuses_unknown_modules() -> None:
    assert (
        _layer_problem("env", "proctor.nowhere")
        == "env imports proctor.nowhere, which is no module"
    )
    assert _layer_problem("env", "proctor.records._gone") is not None
    assert _layer_problem("env", "proctor.records") is None
    assert _layer_problem("env", "proctor.engine") == "env imports proctor.engine (layer engine)"


def test_the_reach_check_sees_private_modules_and_unexported_names() -> None:
    text = (
        "from ..models._retry import Retrier\n"
        "from ..models import _retry\n"
        "import proctor.models._retry\n"
        "from ..models import Retrier\n"
        "from ..models import RetryPolicy\n"
        "from .._errors import ProctorError\n"
        "from .._errors import Nothing\n"
        "from .. import __version__\n"
        "from ._rewards import anything\n"
    )
    found = [_reach("env", i) for i in _names("proctor.env._probe", False, text)]
    assert found == [
        "private module proctor.models._retry",
        "private module proctor.models._retry",
        "private module proctor.models._retry",
        "Retrier is not in proctor.models.__all__",
        None,
        None,
        "Nothing is not in proctor._errors.__all__",
        None,
    ]


def _file_edges(sources: list[tuple[str, bool, str]]) -> dict[str, set[str]]:
    """Module -> the modules of its own package it imports (nested and TYPE_CHECKING
    imports too); a package's `__init__` is left out, as it re-exports its modules."""
    known = {name for name, is_package, _ in sources if not is_package}
    edges: dict[str, set[str]] = {}
    for name, is_package, text in sources:
        if is_package:
            continue
        edges[name] = set()
        for i in _names(name, is_package, text):
            for target in (f"{i.module}.{i.name}", i.module):
                if target in known and target != name:
                    edges[name].add(target)
                    break
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles among modules: each strongly connected set of two or more."""
    found: list[list[str]] = []
    seen: set[str] = set()
    for start in sorted(edges):
        if start in seen:
            continue
        reach = _reachable(edges, start)
        circle = sorted(m for m in reach if start in _reachable(edges, m))
        seen.update(circle)
        if len(circle) > 1:
            found.append(circle)
    return found


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    found, todo = {start}, [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in found:
                found.add(nxt)
                todo.append(nxt)
    return found


def test_no_module_imports_itself_through_others() -> None:
    sources = [(name, is_package, path.read_text()) for path, name, is_package in _sources()]
    assert _circles(_file_edges(sources)) == []


def test_the_circle_check_sees_type_checking_and_nested_imports() -> None:
    sources = [
        ("proctor.x._a", False, "from ._b import B\n"),
        ("proctor.x._b", False, "if TYPE_CHECKING:\n    from ._c import C\n"),
        ("proctor.x._c", False, "def f():\n    from . import _a\n"),
        ("proctor.x._d", False, "from ._a import A\n"),
    ]
    assert _circles(_file_edges(sources)) == [["proctor.x._a", "proctor.x._b", "proctor.x._c"]]


def _lazy_tables() -> dict[Path, tuple[dict[str, str], dict[str, str], list[str]]]:
    """Per package `__init__.py` with a lazy table: (table, TYPE_CHECKING mirror, __all__)."""
    found = {}
    for path in sorted(SRC.rglob("__init__.py")):
        tree = ast.parse(path.read_text())
        table: dict[str, str] = {}
        names: list[str] = []
        mirror: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                if node.targets[0].id == "_EXPORTS":
                    table = ast.literal_eval(node.value)
                elif node.targets[0].id == "__all__" and isinstance(node.value, ast.List):
                    names = ast.literal_eval(node.value)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                for sub in node.body:  # not the `else:` that installs the lazy loader
                    if isinstance(sub, ast.ImportFrom):
                        for alias in sub.names:
                            module = sub.module or alias.name  # `from . import _x as x`
                            mirror[alias.asname or alias.name] = "." * sub.level + module
        if table:
            found[path] = (table, mirror, names or sorted(table))
    return found


def test_the_type_checking_mirror_is_the_export_table() -> None:
    """Each lazy `__init__.py` imports under TYPE_CHECKING exactly what it exports lazily.

    Its `__all__` lists only names of its table (the rest of the table: another home's
    names still importable from here).
    """
    tables = _lazy_tables()
    assert SRC / "__init__.py" in tables and SRC / "env" / "__init__.py" in tables
    for path, (table, mirror, names) in tables.items():
        where = path.relative_to(SRC.parent)
        assert mirror == table, where
        assert set(names) <= set(table), where


if __name__ == "__main__":  # `python tests/test_layers.py`: the reaches, one a line
    print("\n".join(reaches() + _upward()))
    sys.exit(0)
