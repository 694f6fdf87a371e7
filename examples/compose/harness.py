"""A harness placed in the `main` service: it checks the database, then asks the model.

Standard library only (it runs on the Python of `main`'s image). It reads the prompt
on stdin, looks the item up in the `db` service by its name (http://db:8080, the
project's private network), asks the OpenAI-compatible endpoint in
`$OPENAI_BASE_URL` (the interception proxy, reached through the driver: no key and no
route out enter the project) for the new stock, and prints the model's answer.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request


def ask(prompt: str) -> str:
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(
            {"model": "harness", "messages": [{"role": "user", "content": prompt}]}
        ).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def main() -> None:
    prompt = sys.stdin.read()
    item = re.search(r"of '([^']*)'", prompt)
    with urllib.request.urlopen(f"http://db:8080/stock/{item and item[1]}", timeout=10) as r:
        stock = r.read().decode()
    print(ask(f"{prompt}\n\nThe db service reports a stock of {stock}."))


if __name__ == "__main__":
    main()
