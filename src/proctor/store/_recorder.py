"""`RolloutRecorder`: writes one rollout of a `BatchStore`, its record and its folder.

Also what the store and the readers share about a rollout: the assignment it records
(`PlannedRollout`), its id's rule, its record's own file (the layout before segments)
and the index columns an update sets.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from . import _files, _index
from ._journal import Journal, load_record

__all__ = ["PlannedRollout", "RolloutRecorder", "check_id", "index_fields", "load_record"]

_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,159}")
_ARTIFACT = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._ -]{0,199}")


class PlannedRollout(Protocol):
    """What the store needs of an assignment: the plan's `Assignment` has it.

    `rollout_id` names the rollout's record and folder: letters, digits, `.`, `_`,
    `-`, at most 160 characters.
    """

    @property
    def rollout_id(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def agent(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def repeat(self) -> int: ...


def check_id(rollout_id: str) -> str:
    if not _ID.fullmatch(rollout_id):
        raise ValueError(f"bad rollout id {rollout_id!r}: use letters, digits, '.', '_', '-'")
    return rollout_id


def index_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The index columns a rollout update sets (flattening `error` and `usage`)."""
    out = {k: v for k, v in fields.items() if k in _PLAIN_COLUMNS}
    if "error" in fields:
        error = fields["error"] if isinstance(fields["error"], Mapping) else {}
        out["error_phase"] = error.get("phase")
        out["error_type"] = error.get("type")
    if "usage" in fields:
        usage = fields["usage"] if isinstance(fields["usage"], Mapping) else {}
        out["input_tokens"] = usage.get("input_tokens")
        out["output_tokens"] = usage.get("output_tokens")
    return out


_PLAIN_COLUMNS = frozenset(
    {"task", "agent", "model", "repeat", "status", "phase", "attempt", "reward", "cost"}
    | {"started_at", "ended_at"}
)


class RolloutRecorder:
    """Writes one rollout: its record (a line of `rollouts/segment-NNN.jsonl`) and its
    folder's files.

    Get one from `BatchStore.begin`. The folder `rollouts/<id>/` is made only when the
    rollout first writes something that lives there. A record found in its own file
    `rollouts/<id>.json` (a folder written before segments) is read, and removed once
    the record is written again.
    """

    def __init__(self, store: Journal, assignment: PlannedRollout, attempt: int) -> None:
        self.id = check_id(assignment.rollout_id)
        self.attempt = attempt
        self._store = store
        self.record_path = os.path.join(store._rollouts, f"{self.id}.json")
        self.folder = os.path.join(store._rollouts, self.id)
        self.record: dict[str, Any]
        self.record, self._own_file = store._load_record(self.id, self.record_path)
        # A folder can predate this recorder only in a reopened store or for a rollout
        # with a record; then its streams may end in a torn line, cut before appending.
        may_exist = store._reopened or bool(self.record)
        self._has_folder = may_exist and os.path.isdir(self.folder)
        self._cut_tails = self._has_folder
        self._checked: set[str] = set()

    def update(self, *, write: bool = True, **fields: Any) -> None:
        """Merge `fields` into the record and replace it; index the columns among them.

        Indexed: `task`, `agent`, `model`, `repeat`, `status`, `phase`, `attempt`,
        `reward`, `cost`, `started_at`, `ended_at`, `error` (a mapping: its `phase`
        and `type`) and `usage` (a mapping: its `input_tokens` and `output_tokens`).
        Anything else JSON-able is kept in the record only (e.g. `result`, `trace`,
        `stop_reason`, `prompt`). The record is appended to the segment and its event
        (the indexed columns and where the record is) follows. With `write=False` the
        record is left for a later update (the event and the index still get the
        indexed columns).
        """
        store = self._store
        store._check()
        self.record.update(fields)
        indexed = index_fields(fields)
        if write:
            store._append_record(self.id, store._encode(self.record), indexed)
            if self._own_file:  # superseded by the line just written
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.record_path)
                self._own_file = False
            return
        if indexed:
            event = {"t": time.time(), "type": "rollout", "id": self.id, **indexed}
            store._append_events(store._encode(event), {self.id: indexed})

    def finish(self, status: str, **fields: Any) -> None:
        """Record the outcome (`completed`, `failed`, `interrupted`), `ended_at` now."""
        fields.setdefault("ended_at", time.time())
        self.update(status=status, **fields)

    def append_turn(self, turn: Mapping[str, Any]) -> None:
        """Append one model turn to `model_turns.jsonl`."""
        self._append("model_turns.jsonl", self._store._encode(turn))

    def append_user_turn(self, turn: Mapping[str, Any]) -> None:
        """Append one turn of the rollout's user model to `user_turns.jsonl`."""
        self._append("user_turns.jsonl", self._store._encode(turn))

    def append_step(self, step: Mapping[str, Any]) -> None:
        """Append one trace step to `trace.jsonl` (for traces streamed as they grow)."""
        self._append("trace.jsonl", self._store._encode(step))

    def log(self, text: str) -> None:
        """Append `text` to `log.txt`."""
        data = text.encode("utf-8", "replace")
        self._append("log.txt", data if self._store._redact is None else self._store._redact(data))

    def save_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Replace `checkpoint.json`: the model-visible state to continue from."""
        self._replace(os.path.join(self._dir(), "checkpoint.json"), self._store._encode(state))

    def save_private(self, name: str, state: Mapping[str, Any]) -> None:
        """Replace `<name>` in the folder, readable by this user only (mode 0600).

        For what must survive a crash but not be shared: a parked session's resume
        token. Never redacted, so never put a provider key here.
        """
        path = os.path.join(self._dir(), name)
        data = orjson.dumps(state, default=str)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _files.write_all(fd, data)
            if self._store._strict:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(path + ".tmp", path)
        self._store._touched()

    def load_private(self, name: str) -> dict[str, Any]:
        """What `save_private` left under `name` ({} when nothing)."""
        return load_record(os.path.join(self.folder, name))

    def drop_private(self, name: str) -> None:
        """Remove `<name>` from the folder, if it is there."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.folder, name))

    def set_evaluation(self, status: Mapping[str, Any]) -> None:
        """Replace `evaluation/status.json` (grading progress and outcome)."""
        folder = self._dir("evaluation")
        self._replace(os.path.join(folder, "status.json"), self._store._encode(status))

    def add_artifact(self, name: str, data: bytes) -> str:
        """Write `artifacts/<name>` and append its SHA-256 to `artifacts/SHA256SUMS`.

        The manifest is `sha256sum -c` format. Returns the hex digest.

        Raises:
            ValueError: `name` is not a plain file name.
        """
        if not _ARTIFACT.fullmatch(name) or name in (".", "..", "SHA256SUMS"):
            raise ValueError(f"bad artifact name {name!r}")
        folder = self._dir("artifacts")
        self._replace(os.path.join(folder, name), data)
        digest = hashlib.sha256(data).hexdigest()
        _files.append_bytes(
            os.path.join(folder, "SHA256SUMS"),
            f"{digest}  {name}\n".encode(),
            sync=self._store._strict,
        )
        return digest

    def add_frame(self, name: str, data: bytes) -> None:
        """Write the frame `artifacts/<name>` (`frames/<sha256>.<ext>`, named by its
        digest) unless it is there, and list it in `SHA256SUMS`.

        Raises:
            ValueError: `name` is not `frames/` and a plain file name.
        """
        folder, _, file = name.partition("/")
        if folder != "frames" or not _ARTIFACT.fullmatch(file) or file in (".", ".."):
            raise ValueError(f"bad frame name {name!r}")
        frames = os.path.join(self._dir("artifacts"), "frames")
        os.makedirs(frames, exist_ok=True)
        path = os.path.join(frames, file)
        if os.path.isfile(path):  # kept by an earlier attempt or runner of this rollout
            return
        self._replace(path, data)
        digest = hashlib.sha256(data).hexdigest()
        _files.append_bytes(
            os.path.join(self._dir("artifacts"), "SHA256SUMS"),
            f"{digest}  {name}\n".encode(),
            sync=self._store._strict,
        )

    def save_workspace(self, diff: Mapping[str, Any]) -> str:
        """Write the rollout's workspace diff (`WorkspaceDiff.to_wire()`) as the artifact
        `workspace.json`, listed in `SHA256SUMS` like any other (secret values
        redacted). Returns its digest."""
        return self.add_artifact("workspace.json", self._store._encode(diff))

    def archive(self) -> None:
        """Move this rollout's record and files to `rollouts/<id>/attempts/<n>/`.

        The record is written there as `rollout.json` (its segment line stays, no
        longer indexed once the next attempt begins).
        """
        store = self._store
        old = self.record.get("attempt", 0)
        target = os.path.join(self.folder, "attempts", str(old))
        os.makedirs(target, exist_ok=True)
        if os.path.isdir(self.folder):
            for name in os.listdir(self.folder):
                if name not in ("attempts", "refused"):
                    os.replace(os.path.join(self.folder, name), os.path.join(target, name))
        if self._own_file:
            os.replace(self.record_path, os.path.join(target, "rollout.json"))
            self._own_file = False
        else:
            data = store._encode(self.record)
            _files.write_atomic(os.path.join(target, "rollout.json"), data, sync=store._strict)
        if store._strict:
            for folder in (target, self.folder, store._rollouts):
                _files.fsync_dir(folder)
        store._touched()
        event = {"t": time.time(), "type": "rollout", "id": self.id, "record": None}
        store._append_events(store._encode(event), {self.id: _index.location_fields(None)})
        self.record = {}
        self._has_folder = True

    def _dir(self, sub: str | None = None) -> str:
        if not self._has_folder:
            os.makedirs(self.folder, exist_ok=True)
            if self._store._strict:
                _files.fsync_dir(self._store._rollouts)
            self._has_folder = True
        if sub is None:
            return self.folder
        path = os.path.join(self.folder, sub)
        if not os.path.isdir(path):
            os.mkdir(path)
            if self._store._strict:
                _files.fsync_dir(self.folder)
        return path

    def _append(self, name: str, data: bytes) -> None:
        self._store._check()
        path = os.path.join(self._dir(), name)
        if self._cut_tails and name not in self._checked:
            _files.truncate_torn_tail(path)
            self._checked.add(name)
        _files.append_bytes(path, data, sync=self._store._strict)
        self._store._touched()

    def _replace(self, path: str, data: bytes) -> None:
        self._store._check()
        _files.write_atomic(path, data, sync=self._store._strict)
        self._store._touched()
