"""A scripted stand-in for a model, so `shellfix` runs offline end to end.

`policy` answers each request the way a careful model would: read the script, patch
the line that is wrong, run the command from the prompt, then report. It serves from
`proctor.testing.FakeModelServer`; `OfflineAgent` puts a `ToolAgent` in front of it.
Set `SHELLFIX_MODEL` (e.g. `openai/gpt-4.1-mini`) to use a real model instead.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from env import BUGS
from proctor.agents import ToolAgent
from proctor.testing import FakeModelServer, FakeRequest, Reply

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["OfflineAgent", "policy"]

_SCRIPT = re.compile(r"`(\w+\.py)`")
_COMMAND = re.compile(r"`(python3 [^`]+)`")
_PATCHES = [bug.patch for bug in BUGS.values()]
_EDIT = """python3 - <<'EOF'
from pathlib import Path
path = Path({script!r})
path.write_text(path.read_text().replace({old!r}, {new!r}, 1))
EOF"""


def policy(request: FakeRequest) -> Reply:
    """The next turn, from the conversation so far."""
    messages = request.messages
    prompt = next(str(m["content"]) for m in messages if m["role"] == "user")
    results = [str(m["content"]) for m in messages if m["role"] == "tool"]
    script, command = _SCRIPT.search(prompt), _COMMAND.search(prompt)
    if script is None or command is None:
        return Reply(text="I do not know which script to fix.")
    if not results:
        return Reply.tool("shell", command=f"ls -a && cat {script[1]}")
    if len(results) == 1:
        patch = next((p for p in _PATCHES if p[0] in results[0]), None)
        if patch is None:
            return Reply(text="I could not find the bug.")
        edit = _EDIT.format(script=script[1], old=patch[0], new=patch[1])
        return Reply.tool("shell", command=edit)
    if len(results) == 2:
        return Reply.tool("shell", command=command[1])
    output = results[-1].partition("--- stdout ---\n")[2]
    return Reply(text=f"Fixed {script[1]}; `{command[1]}` now prints: {output.strip()[:80]!r}")


class OfflineAgent:
    """A `ToolAgent` on `policy`, served by a fake model server per rollout."""

    async def __call__(self, run: Run) -> None:
        model = os.environ.get("SHELLFIX_MODEL")
        if model:
            await ToolAgent(model, max_steps=20)(run)
            return
        async with FakeModelServer(policy) as fake:
            await ToolAgent(f"fake/shellfix@{fake.url}", max_steps=8)(run)
