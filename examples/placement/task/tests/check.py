"""The task's test: 1.0 when notes.txt says `hello world` (run by the environment)."""

from pathlib import Path


def score(workdir: Path) -> float:
    return 1.0 if (workdir / "notes.txt").read_text().strip() == "hello world" else 0.0
