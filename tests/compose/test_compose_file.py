"""`load_compose`: the Compose format as users write it, and one-line errors naming
the file and the key (never a traceback, on any YAML)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.runtimes._compose_file import load_compose, parse_compose


def _write(folder: Path, text: str) -> Path:
    path = folder / "compose.yaml"
    path.write_text(text)
    return path


def test_the_keys_users_write_are_read(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "Dockerfile").write_text("FROM scratch\n")
    text = """
version: "3.9"
x-common: &common {working_dir: /srv}
services:
  db:
    image: ${DB_IMAGE:-postgres}
    command: serve --port 5432 "a b"
    environment: [A=1, B=two=2, HOST_ONLY]
    volumes: ["./data:/var/lib/data:ro", {type: tmpfs, target: /scratch}]
    ports: ["5432:5432"]
    healthcheck: {test: ["CMD-SHELL", "pg_isready"], interval: 1m30s, retries: 2}
    stop_grace_period: 500ms
  main:
    <<: *common
    build: {context: ./app, dockerfile: Dockerfile}
    entrypoint: ["python", "-u"]
    environment: {DB: db, PORT: 8000, DEBUG: true, UNSET: null}
    depends_on: {db: {condition: service_healthy}}
    networks: [backend]
"""
    file = load_compose(_write(tmp_path, text), variables={})
    db, main = file.services["db"], file.services["main"]
    assert file.order == ("db", "main")
    assert db.image == "postgres" and db.command == ("serve", "--port", "5432", "a b")
    assert db.environment == {"A": "1", "B": "two=2"}
    assert [(v.source, v.target, v.read_only) for v in db.volumes] == [
        (str(tmp_path / "data"), "/var/lib/data", True),
        (None, "/scratch", False),
    ]
    assert db.healthcheck is not None and db.healthcheck.test == ("/bin/sh", "-c", "pg_isready")
    assert (db.healthcheck.interval, db.healthcheck.retries) == (90.0, 2)
    assert db.stop_grace_period == 0.5
    assert main.build_context == str(tmp_path / "app") and main.working_dir == "/srv"
    assert main.environment == {"DB": "db", "PORT": "8000", "DEBUG": "true"}
    assert main.depends_on == {"db": "service_healthy"} and main.entrypoint == ("python", "-u")
    assert any("ports ignored" in note for note in file.notes)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "services: {main: {image: x, privileged: true}}",
            "services.main.privileged: not supported",
        ),
        ("services: {main: {image: x}}\nvolumes: {data: {}}", "volumes: not supported (named"),
        (
            "services: {main: {image: x, volumes: ['data:/d']}}",
            "services.main.volumes[0]: 'data' is a named",
        ),
        ("services: {main: {image: x, volumes: ['../..:/d']}}", "is outside the project's folder"),
        ("services: {main: {image: x}, db: {}}", "services.db: needs an image or a build"),
        ("services: {db: {image: x}}", "services: no 'main' service"),
        (
            "services: {main: {image: x, depends_on: [db]}}",
            "services.main.depends_on: no service 'db'",
        ),
        (
            "services: {main: {image: x, depends_on: {db: {condition: service_healthy}}},"
            " db: {image: y}}",
            "services.main.depends_on.db: service 'db' has no healthcheck",
        ),
        (
            "services: {main: {image: x}, a: {image: y, depends_on: [b]},"
            " b: {image: z, depends_on: [a]}}",
            "a cycle",
        ),
        (
            "services: {main: {image: x, healthcheck: {test: [CMD], interval: soon}}}",
            "healthcheck.test",
        ),
        ("services: {main: {image: '${IMAGE}'}}", "services.main.image: ${IMAGE} is not set"),
        ("services: [main]", "services: a mapping of one or more services"),
        ("services: {main: {image: x}", "yaml: not valid YAML at line"),
    ],
)
def test_a_wrong_key_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, text: str, error: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as caught:
        load_compose(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and error in message and "\n" not in message


def test_an_alias_bomb_is_refused_not_expanded(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    with pytest.raises(ValueError, match="more than 100000 values"):
        load_compose(_write(tmp_path, "\n".join(lines) + "\nservices: *a11\n"))


_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_keys = st.sampled_from(
    ["services", "main", "db", "image", "build", "command", "entrypoint", "environment",
     "depends_on", "healthcheck", "test", "interval", "retries", "volumes", "condition",
     "working_dir", "context", "type", "target", "source", "x-a", "ports"]
) | st.text(max_size=8)  # fmt: skip
_docs = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=30,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(doc=_docs)
def test_random_documents_never_raise_anything_but_a_one_line_error(doc: object) -> None:
    import json

    text = json.dumps(doc)  # JSON is YAML
    try:
        parse_compose(text, Path("/nonexistent/compose.yaml"))
    except ValueError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="{}[]:,-&*!|>'\"#%@` \nabcxyz019$.", max_size=80))
def test_random_text_never_raises_anything_but_a_one_line_error(text: str) -> None:
    try:
        parse_compose(text, Path("/nonexistent/compose.yaml"))
    except ValueError as exc:
        assert "\n" not in str(exc)
