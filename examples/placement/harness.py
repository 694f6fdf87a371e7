"""A tiny harness, placed inside the task's substrate: it asks the model what to write.

Standard library only (it runs on whatever Python the substrate has). It reads the
instruction on stdin, asks the OpenAI-compatible endpoint in `$OPENAI_BASE_URL` (the
interception proxy, reached through the driver) for a JSON edit
`{"path": ..., "content": ...}`, applies it under `/tmp/workspace` and prints the model's answer.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.request
from pathlib import Path


def ask(messages: list[dict[str, str]]) -> str:
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps({"model": "harness", "messages": messages}).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def main() -> None:
    instruction = sys.stdin.read()
    work = Path(tempfile.gettempdir()) / "workspace"
    files = {p.name: p.read_text() for p in sorted(work.iterdir()) if p.is_file()}
    prompt = f"{instruction}\n\nFiles: {json.dumps(files)}\nReply with JSON: path, content."
    edit = json.loads(ask([{"role": "user", "content": prompt}]))
    (work / Path(edit["path"]).name).write_text(edit["content"])
    print(ask([{"role": "user", "content": f"I wrote {edit['path']}. What do I say?"}]))


if __name__ == "__main__":
    main()
