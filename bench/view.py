"""The dashboard's first paint: a 100,000-rollout batch page in Debian's chromium.

    .venv/bin/python bench/view.py [--sizes 1000,100000] [--runs 7] [--requests 30]
        [--dir PARENT] [--keep] [--json PATH]
    .venv/bin/python bench/view.py --screenshots docs/img

Each size is an output directory written with `BatchStore` and `RolloutRecorder`, the
way a runner records (as bench/batch_store.py does): 200 tasks x 3 models, rewards
spread over [0, 1], about 7% failed in one of three phases, a cost and usage per
rollout. One `python -m proctor.cli view DIR...` child serves them all. Figures:

- browser (Playwright on /usr/bin/chromium, the flags of tests/view/conftest.py; a
  fresh context per load, so no cache): first-contentful-paint
  (`performance.getEntriesByType('paint')`), DOMContentLoaded (the navigation entry's
  `domContentLoadedEventEnd`), and `rows`: when `document.body.dataset.loaded` is first
  set (the rollout table shows its first rows; a MutationObserver from an init script
  takes the time), all in ms from navigation start (TTFB: the navigation entry's
  `responseStart`, the server's share), p50 over `--runs` loads. The
  static 404 page and the smaller batch are the baseline in the same run.
- server: `GET /b/NAME` and `GET /api/b/NAME/rollouts?limit=200` latency p50 (and
  max) over `--requests` sequential requests, and the server's RSS (VmRSS, and its
  peak VmHWM) after serving everything.

Budget (the dashboard issue): first paint of the 100,000-rollout batch page under
1 s on this machine. The load average is printed with the table: its 2 cores may be
shared. `--screenshots DIR` instead writes DIR/batch-page.png and
DIR/rollout-page.png (1280x800) from a small real batch, for the README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

BUDGET_MS = 1000.0
CHROMIUM = "/usr/bin/chromium"
ARGS = [  # tests/view/conftest.py's flags
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
COLUMNS = ("ttfb", "fcp", "dcl", "rows")
MODELS = ("gpt-4.1-mini", "claude-sonnet-4", "qwen3-8b")
TASKS = 200
PHASES = ("agent", "evaluate", "setup")

# Times the first `data-loaded` on <body>; init scripts run before the page's own.
OBSERVE = """
(() => {
  const seen = () => {
    if (document.body && document.body.dataset.loaded && !window.__rowsAt) {
      window.__rowsAt = performance.now();
    }
  };
  new MutationObserver(seen).observe(document, {
    subtree: true, attributes: true, attributeFilter: ["data-loaded"],
  });
})();
"""
TIMINGS = """
() => {
  const fcp = performance.getEntriesByType("paint")
    .find((e) => e.name === "first-contentful-paint");
  const nav = performance.getEntriesByType("navigation")[0];
  return {ttfb: nav.responseStart, fcp: fcp ? fcp.startTime : null,
          dcl: nav.domContentLoadedEventEnd,
          rows: window.__rowsAt ?? null};
}
"""


# -- the output directories -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assignment:
    """The fields of a planned rollout the store reads (`proctor.batch.PlannedRollout`)."""

    rollout_id: str
    task: str
    agent: str | None
    model: str | None
    repeat: int


def _assignment(i: int) -> Assignment:
    task, model = f"task-{i % TASKS:03d}", MODELS[i // TASKS % len(MODELS)]
    repeat = i // (TASKS * len(MODELS))
    return Assignment(f"{task}.{model}.r{repeat}", task, "tool", model, repeat)


def _outcome(rng: random.Random, i: int, t: float) -> tuple[str, dict[str, Any]]:
    """A rollout's status and recorded fields: rewards spread, some failures."""
    usage = {"input_tokens": rng.randint(400, 9000), "output_tokens": rng.randint(20, 900)}
    fields: dict[str, Any] = {
        "prompt": f"Solve task {i % TASKS} (rollout {i})",
        "usage": usage,
        "cost": usage["input_tokens"] * 4e-7 + usage["output_tokens"] * 1.6e-6,
        "started_at": t - rng.uniform(2, 40),
        "ended_at": t,
    }
    if rng.random() < 0.07:
        phase = rng.choice(PHASES)
        error = {"phase": phase, "type": "RuntimeError", "message": f"{phase} failed"}
        return "failed", {**fields, "phase": phase, "reward": None, "error": error}
    skill = (i % TASKS) / TASKS
    reward = round(min(1.0, max(0.0, rng.gauss(skill, 0.25))), 3)
    return "completed", {**fields, "phase": "done", "reward": reward, "answer": "42"}


def build(out: Path, n: int) -> Path:
    """Record `n` synthetic rollouts into a new output directory `out`."""
    from proctor.batch import BatchStore

    rng, t0 = random.Random(n), time.time() - n * 0.01
    with BatchStore.create(out, {"name": out.name, "config": {"bench": "view", "n": n}}) as store:
        store.add_assignments(_assignment(i) for i in range(n))
        for i in range(n):
            rec = store.begin(_assignment(i), phase="agent")
            status, fields = _outcome(rng, i, t0 + i * 0.01)
            rec.finish(status, **fields)
    return out


# -- the server -------------------------------------------------------------------------


class Server:
    """`python -m proctor.cli view DIRS...` as a child, until `stop`."""

    def __init__(self, *outs: Path, log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "proctor.cli", "view", *map(str, outs)]
        with open(log, "wb") as err:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("PROCTOR_VIEW_URL="):
            raise SystemExit(f"proctor view did not start: {line!r}; see {log}")
        self.url = line.removeprefix("PROCTOR_VIEW_URL=").rstrip("/")

    def rss_mb(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) of the server in MB."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
        kb = {k: int(v.split()[0]) for k, v in (s.split(":", 1) for s in status) if "kB" in v}
        return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024

    def stop(self) -> None:
        """SIGTERM, then wait."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def http_latency(url: str, requests: int) -> dict[str, float]:
    """p50 and max ms of `requests` sequential GETs of `url` (each must be 200)."""
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as resp:
            resp.read()
            assert resp.status == 200, (url, resp.status)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"p50": statistics.median(times), "max": max(times)}


# -- the browser ------------------------------------------------------------------------


async def _load(browser: Any, url: str, rows: bool) -> dict[str, float | None]:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = await context.new_page()
        await page.add_init_script(OBSERVE)
        await page.goto(url, wait_until="load")
        if rows:
            await page.wait_for_function("() => window.__rowsAt", timeout=60_000)
        else:
            await page.wait_for_function(
                "() => performance.getEntriesByType('paint').length", timeout=60_000
            )
        timings: dict[str, float | None] = await page.evaluate(TIMINGS)
        return timings
    finally:
        await context.close()


async def browser_loads(targets: list[tuple[str, str, bool]], runs: int) -> dict[str, Any]:
    """p50 timings per target (label, url, has a rollout table), loads interleaved."""
    from playwright.async_api import async_playwright

    samples: dict[str, list[dict[str, float | None]]] = {label: [] for label, _, _ in targets}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for _label, url, rows in targets:  # one warm-up each (server caches, JIT)
                await _load(browser, url, rows)
            for _ in range(runs):
                for label, url, rows in targets:
                    samples[label].append(await _load(browser, url, rows))
        finally:
            await browser.close()
    return {label: _p50s(s) for label, s in samples.items()}


def _p50s(samples: list[dict[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in COLUMNS:
        values = [s[key] for s in samples if s[key] is not None]
        out[key] = statistics.median(values) if values else None  # type: ignore[type-var]
        out[key + "_max"] = max(values) if values else None  # type: ignore[type-var]
    return out


# -- the report -------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _cell(p50: float | None, top: float | None) -> str:
    return f"{_ms(p50):>5} ({_ms(top)})"


def report(fig: dict[str, Any]) -> str:
    """The table, the server figures and the verdict."""
    head = f"{'page':<28} {'TTFB ms':>12} {'FCP ms':>12} {'DCL ms':>12} {'rows ms':>12}"
    lines = [f"browser, p50 (max) over {fig['runs']} fresh loads each", head, "-" * len(head)]
    for label, b in fig["browser"].items():
        cols = " ".join(f"{_cell(b[k], b[k + '_max']):>12}" for k in COLUMNS)
        lines.append(f"{label:<28} {cols}")
    lines.append("")
    lines.append(f"server, p50 (max) over {fig['requests']} sequential requests each")
    for label, s in fig["server"].items():
        lines.append(f"  {label:<54} {s['p50']:>7.1f} ms ({s['max']:.1f})")
    rss, hwm = fig["rss_mb"]
    lines.append(f"  server RSS after serving: {rss:.0f} MB (peak {hwm:.0f} MB)")
    big = fig["browser"][fig["budget_label"]]
    ok = big["fcp"] is not None and big["fcp"] < BUDGET_MS
    lines.append(
        f"budget: first paint of the {fig['budget_label']} page {_ms(big['fcp'])} ms "
        f"(p50; rows at {_ms(big['rows'])} ms) < {BUDGET_MS:.0f} ms: {'ok' if ok else 'MISS'}"
    )
    load0, load1 = fig["load"]
    lines.append(f"load average before: {load0}; after: {load1}; cores: {os.cpu_count()}")
    return "\n".join(lines)


def _load_avg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(args: argparse.Namespace) -> None:
    """Build the sizes, serve them, measure, print."""
    sizes = [int(s) for s in args.sizes.split(",")]
    parent = Path(tempfile.mkdtemp(prefix="bench-view-", dir=args.dir))
    try:
        outs = []
        for n in sizes:
            t0 = time.perf_counter()
            outs.append(build(parent / f"batch-{n}", n))
            print(f"built {n:,} rollouts in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        load0 = _load_avg()
        server = Server(*outs, log=parent / "view.err")
        try:
            fig = _figures(server, sizes, args)
        finally:
            server.stop()
        fig["load"] = (load0, _load_avg())
        print(report(fig))
        if args.json:
            Path(args.json).write_text(json.dumps(fig, indent=2))
    finally:
        if args.keep:
            print(f"kept {parent}", file=sys.stderr)
        else:
            shutil.rmtree(parent, ignore_errors=True)


def _figures(server: Server, sizes: list[int], args: argparse.Namespace) -> dict[str, Any]:
    targets = [(f"batch page, {n:,} rollouts", f"{server.url}/b/batch-{n}", True) for n in sizes]
    targets.append(("404 page (static)", f"{server.url}/no-such-page", False))
    browser = asyncio.run(browser_loads(targets, args.runs))
    http = {}
    for n in sizes:
        base = f"{server.url}/b/batch-{n}"
        api = f"{server.url}/api/b/batch-{n}/rollouts?limit=200"
        http[f"GET /b/batch-{n}"] = http_latency(base, args.requests)
        http[f"GET /api/b/batch-{n}/rollouts?limit=200"] = http_latency(api, args.requests)
    return {
        "runs": args.runs,
        "requests": args.requests,
        "browser": browser,
        "server": http,
        "rss_mb": server.rss_mb(),
        "budget_label": f"batch page, {max(sizes):,} rollouts",
    }


# -- the README screenshots -------------------------------------------------------------

TOOL_AGENT = '''
"""The built-in ToolAgent on the fake model, with two tools for the letters rows."""

import os

from proctor.agents import ToolAgent


def reverse_word(word: str) -> str:
    """The word written backwards."""
    return word[::-1]


def add_numbers(numbers: list[int]) -> int:
    """The sum of a list of integers."""
    return sum(numbers)


agent = ToolAgent(os.environ["BENCH_VIEW_MODEL"], max_steps=4, tools=[reverse_word, add_numbers])
'''

CONFIG = """
name = "letters-demo"
max_concurrent = 4
repeats = 2
expected_rollouts = 48

[taskset]
source = "{tasks}"

[[agents]]
kind = "python"
name = "solver"
agent = "{solver}"

[[agents]]
kind = "python"
name = "tool-agent"
agent = "{tool_agent}"

[runtime]
kind = "local"
trusted = true

[timeouts]
rollout = 60
"""


def _policy(request: Any) -> Any:
    """The fake model: a tool call where a tool fits, the tool's result as the answer."""
    import re

    from proctor.testing import FakeToolCall, Reply

    messages = (request.json or {}).get("messages") or [{}]
    last = messages[-1]
    if last.get("role") == "tool":
        return Reply(text=str(last.get("content", "")).strip().strip('"'))
    prompt = str(last.get("content", ""))
    if word := re.search(r"word '(\w+)' backwards", prompt):
        call = FakeToolCall("reverse_word", {"word": word[1]})
        return Reply(text="I will reverse it with the tool.", tool_calls=(call,))
    if numbers := re.search(r"numbers: ([-\d, ]*)\?", prompt):
        values = [int(x) for x in re.findall(r"-?\d+", numbers[1])]
        call = FakeToolCall("add_numbers", {"numbers": values})
        return Reply(text="Adding them up with the tool.", tool_calls=(call,))
    return Reply(text="2")  # a guess: no tool counts letters


async def _demo_batch(root: Path) -> Path:
    """The letters rows, twice, by the reference solver and by a ToolAgent on the fake model."""
    from proctor.batch import aexecute
    from proctor.testing import FakeModelServer

    letters = ROOT / "examples" / "letters"
    (root / "tool_agent.py").write_text(TOOL_AGENT.lstrip())
    config = root / "letters-demo.toml"
    config.write_text(
        CONFIG.format(
            tasks=letters / "tasks.py",
            solver=f"{letters / 'solver.py'}:solver",
            tool_agent=f"{root / 'tool_agent.py'}:agent",
        )
    )
    async with FakeModelServer(policy=_policy) as fake:
        os.environ["BENCH_VIEW_MODEL"] = f"fake/fake-model@{fake.url}"
        result = await aexecute(config, root / "letters-demo")
    if not result.launched:
        raise SystemExit(f"the demo batch did not launch:\n{result.to_json()}")
    return root / "letters-demo"


async def _shoot(url: str, dest: Path) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            page = await context.new_page()
            await page.goto(f"{url}/b/letters-demo", wait_until="load")
            await page.wait_for_function("() => document.body.dataset.loaded")
            await page.screenshot(path=dest / "batch-page.png")
            rows = "tr[data-rollout^='sum-'][data-rollout*='tool-agent']"  # a tool call
            link = page.locator(f"{rows} a.rollout-link").first
            await page.goto(url + str(await link.get_attribute("href")), wait_until="load")
            await page.wait_for_selector("div.turn div.tool-call")
            await page.evaluate("document.querySelector('div.turn').scrollIntoView()")
            await page.evaluate("window.scrollBy(0, -160)")  # the prompt above the turns
            await page.screenshot(path=dest / "rollout-page.png")
        finally:
            await browser.close()


def screenshots(dest: Path) -> None:
    """Write DEST/batch-page.png and DEST/rollout-page.png from a small real batch."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-view-shots-") as tmp:
        out = asyncio.run(_demo_batch(Path(tmp)))
        server = Server(out, log=Path(tmp) / "view.err")
        try:
            asyncio.run(_shoot(server.url, dest))
        finally:
            server.stop()
    for name in ("batch-page.png", "rollout-page.png"):
        print(f"{dest / name}: {(dest / name).stat().st_size / 1024:.0f} KB")


def main() -> None:
    """Measure first paint, or write the README screenshots."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="1000,100000")
    p.add_argument("--runs", type=int, default=7, help="browser loads per page")
    p.add_argument("--requests", type=int, default=30, help="HTTP requests per route")
    p.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temp folder")
    p.add_argument("--keep", action="store_true", help="keep the output directories")
    p.add_argument("--json", help="write every figure to this file")
    p.add_argument("--screenshots", metavar="DIR", help="write the README screenshots instead")
    args = p.parse_args()
    if args.screenshots:
        screenshots(Path(args.screenshots))
        return
    measure(args)


if __name__ == "__main__":
    main()
