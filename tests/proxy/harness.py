"""A harness that knows nothing of proctor: stdin prompt, OpenAI API over plain HTTP.

It reads `OPENAI_BASE_URL` / `OPENAI_API_KEY` like any OpenAI client and prints its
answer. `HARNESS_TURNS` sets how many model turns it makes.
"""

import json
import os
import sys
import urllib.error
import urllib.request

prompt = sys.stdin.read()
messages = [{"role": "user", "content": prompt}]
answer = ""
for _ in range(int(os.environ.get("HARNESS_TURNS", "1"))):
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "gpt-4.1-mini", "messages": messages}).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(req) as resp:
            answer = json.load(resp)["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:  # a refused turn (budget) ends the loop
        print(exc.read().decode(), file=sys.stderr)
        break
    messages += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "more: " + prompt},
    ]
leaked = [
    k
    for k in os.environ
    if k.endswith("_API_KEY") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
]
print(json.dumps({"answer": answer, "leaked": leaked, "key": os.environ["OPENAI_API_KEY"]}))
