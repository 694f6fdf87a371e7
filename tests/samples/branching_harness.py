"""A harness that knows nothing of proctor (stdin prompt, OpenAI API over plain HTTP)
and whose conversation branches: two turns, a sub-agent's turn, the parent again, then
a compacted history and one more turn. Expected branches: turns 1, 2, 4; 3; 5, 6.
"""

import json
import os
import sys
import urllib.request
from typing import Any


def ask(messages: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"model": "m", "messages": messages, "logprobs": True, "return_token_ids": True}
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req) as resp:
        return json.load(resp)["choices"][0]["message"]


main = [{"role": "user", "content": sys.stdin.read()}]
for i in range(2):
    main += [ask(main), {"role": "user", "content": f"go on {i}"}]
summary = ask([{"role": "user", "content": "sub-task: summarize the work"}])["content"]
main += [ask(main), {"role": "user", "content": f"the sub-agent says {summary}"}]
main = [main[0], {"role": "user", "content": f"[compacted] {summary}"}]
main += [ask(main), {"role": "user", "content": "finish"}]
print(ask(main)["content"])
