"""Reward 1 when /app/answer.txt holds the apples the inventory service reports."""

import json
import os
import urllib.request
from pathlib import Path

with urllib.request.urlopen(f"{os.environ['INVENTORY']}/stock.json", timeout=10) as response:
    expected = json.load(response)["apples"]
answer = Path("/app/answer.txt")
got = answer.read_text().strip() if answer.exists() else ""
print(f"expected {expected}, got {got!r}")
Path("/logs/verifier/reward.txt").write_text("1\n" if got == str(expected) else "0\n")
