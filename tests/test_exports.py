"""The public surface is curated (httpx style): one home per name, one exception tree.

Every public name is listed in the `__all__` of exactly one public package, its home,
and each exported class or function says so in its `__module__`. `proctor` itself is
the index of the names most users need: each maps to its home, and the errors live
there (`proctor._errors` is private).
"""

import ast
import builtins
import importlib
import inspect
import pickle
import re
import subprocess
import sys
from pathlib import Path

import proctor
import proctor._errors

PACKAGES = [
    "proctor.agents",
    "proctor.batch",
    "proctor.channel",
    "proctor.engine",
    "proctor.env",
    "proctor.importers",
    "proctor.models",
    "proctor.proxy",
    "proctor.records",
    "proctor.runtimes",
    "proctor.samples",
    "proctor.store",
    "proctor.tasks",
    "proctor.testing",
]
SRC = Path(proctor.__file__).parent


def _homes() -> dict[str, str]:
    """Public name -> the one package whose `__all__` lists it."""
    homes: dict[str, str] = {}
    for package in PACKAGES:
        for name in importlib.import_module(package).__all__:
            assert name not in homes, f"{name} is listed by {homes[name]} and {package}"
            homes[name] = package
    return homes


def test_every_export_resolves() -> None:
    for name in proctor.__all__:
        assert getattr(proctor, name) is not None, name
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            assert hasattr(module, name), f"{package}.{name}"


def test_every_public_name_has_one_home() -> None:
    homes = _homes()
    for name in proctor.__all__:
        value = getattr(proctor, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert name not in homes, f"{name}: errors are exported from proctor only"
            continue
        assert name in homes, f"proctor.{name} is in no package's __all__"
        assert getattr(importlib.import_module(homes[name]), name) is value


def test_module_is_the_public_path() -> None:
    homes = {**_homes(), **{n: "proctor" for n in proctor.__all__ if n not in _homes()}}
    for name, home in homes.items():
        value = getattr(importlib.import_module(home), name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == home, f"{name}.__module__ is {value.__module__}"


def test_every_exception_class_is_in_the_one_tree() -> None:
    """Public exception classes are defined in `_errors.py` and drawn in its docstring."""
    bases = {n for n in dir(builtins) if _is_exception(getattr(builtins, n))}
    bases |= set(proctor._errors.__all__)
    stray = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_errors.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                names = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if names & bases:
                    stray.append(f"{path.relative_to(SRC)}: {node.name}")
    assert stray == []
    drawn = proctor._errors.__doc__ or ""
    assert [n for n in proctor._errors.__all__ if not re.search(rf"\b{n}\b", drawn)] == []


def _is_exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        proctor.nope  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_proctor_does_not_load_pydantic_or_model_sdks() -> None:
    code = (
        "import sys, proctor, proctor.env, proctor.channel, proctor.runtimes, proctor.serve;"
        "print(sorted(m for m in ('pydantic', 'openai', 'anthropic', 'ray') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_agents_models_and_proxy_load_no_sdk_until_used() -> None:
    code = (
        "import sys, proctor.agents, proctor.models, proctor.proxy, proctor.testing;"
        "print(sorted(m for m in ('openai', 'anthropic', 'mcp', 'httpx', 'httpx2', 'uvicorn') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def _fresh(code: str) -> str:
    """stdout of `code` run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_a_package_loads_none_of_its_modules() -> None:
    """Exports load on first use (PEP 562): a package's import costs next to nothing."""
    code = (
        f"import sys, {', '.join(PACKAGES)};"
        "print(sorted(m for m in sys.modules if m.startswith('proctor.')))"
    )
    assert _fresh(code) == str(sorted(["proctor._public", *PACKAGES]))


def test_a_lazy_export_loads_only_its_module() -> None:
    code = (
        "import sys; from proctor.runtimes import Endpoint;"
        "print(sorted(m for m in sys.modules if m.startswith('proctor.runtimes.')))"
    )
    assert _fresh(code) == "['proctor.runtimes._base']"


def test_dir_lists_every_export_before_any_is_loaded() -> None:
    for package in PACKAGES:
        module = importlib.import_module(package)
        assert set(module.__all__) <= set(dir(module)), package


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    for package in ["proctor", *PACKAGES]:
        module = importlib.import_module(package)
        try:
            module.nope  # noqa: B018
        except AttributeError as exc:
            assert str(exc) == f"module {package!r} has no attribute 'nope'"
        else:
            raise AssertionError(f"{package}.nope resolved")


def test_star_import_gives_every_export() -> None:
    for package in ["proctor", *PACKAGES]:
        namespace: dict[str, object] = {}
        exec(f"from {package} import *", namespace)
        assert set(importlib.import_module(package).__all__) <= set(namespace), package


def test_exported_classes_and_functions_pickle_by_their_public_path() -> None:
    """Ray and multiprocessing ship them by reference: module and name must resolve."""
    for package in ["proctor", *PACKAGES]:
        module = importlib.import_module(package)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert pickle.loads(pickle.dumps(value)) is value, f"{package}.{name}"
    grade = proctor.Grade(reward=0.5)
    assert pickle.loads(pickle.dumps(grade)) == grade


def test_a_class_reached_through_its_module_first_gets_its_public_path() -> None:
    """Inside a package, modules import each other directly: the package still publishes
    what they loaded once any of its names is touched."""
    code = (
        "from proctor.env._template import Template; import proctor.env;"
        "proctor.env.Environment; print(Template.__module__)"
    )
    assert _fresh(code) == "proctor.env"
