"""How fast `aworld-train view` opens a run: the page's weight and the time to show the overview, a
step's GRPO groups, a step's episode list, one episode token by token, and a text search, measured
in the system's Chromium (Playwright) against the server `aworld-train view` runs.

    python bench/viewer_load.py --run runs/calculator            # a run folder you have
    python bench/viewer_load.py --synthetic 10000 [--keep DIR]   # a made-up run of N episodes

The synthetic run: steps of 25 tasks x 8 samples, each episode a 600-token prompt (its task's, shared
by its group) and three policy calls of 60 sampled tokens with 40 template tokens after each, a tool
call per call with its latency, the learner's logprobs and an advantage per sample. Times run from
the click to the view drawn: the first opening (the server reads the run's files), and the median of
--repeat openings.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def synthetic_run(folder: Path, episodes: int, seed: int = 0) -> Path:
    from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory
    from aworld_train.rollout.samples.token_log import EpisodeNotes, step_set, write_episodes
    from aworld_train.rollout.tokens.ledger import Segment

    rng = random.Random(seed)
    per_step, group = 200, 8
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(
        "backend: local\nmodel: embedded:smollm2-135m\nrollout: {tool_block: never}\n"
    )
    metrics = []
    for step in range(1, episodes // per_step + 1):
        trajs, notes = [], []
        for task in range(per_step // group):
            prompt = [rng.randrange(1, 49000) for _ in range(600)]
            for sample in range(group):
                response, mask, logprobs, starts = [], [], [], [600]
                calls = []
                for turn in range(3):
                    sampled = [rng.randrange(1, 49000) for _ in range(60)]
                    response += sampled + [rng.randrange(1, 49000) for _ in range(40)]
                    mask += [1] * 60 + [0] * 40
                    logprobs += [-rng.expovariate(2.0) for _ in range(60)] + [0.0] * 40
                    starts.append(600 + len(response))
                    calls.append(
                        ToolCallRecord(
                            f"c{turn}",
                            "calculate",
                            {"expression": f"{task} * {turn}"},
                            result=str(task * turn),
                            turn=turn,
                            latency_s=rng.uniform(0.01, 0.3),
                        )  # fmt: skip
                    )
                seg = Segment(prompt, response, mask, logprobs, starts[:-1], agent="calculator_agent")
                reward = float(rng.random() < 0.5)
                traj = Trajectory(
                    f"s{step}-t{task}-{sample}", f"task-{task}", reward=reward, segments=[seg], tool_calls=calls,
                    num_turns=3, final_answer=f"The answer is {task * 7 + sample}.",
                    messages=[{"role": "user", "content": f"What is {task} * 7?"},
                              {"role": "assistant", "content": f"The answer is {task * 7 + sample}."}],
                )  # fmt: skip
                trajs.append(traj)
                sampled_lps = [lp for lp, m in zip(logprobs, mask, strict=True) if m]
                trainer = [lp + rng.gauss(0, 0.01) for lp in sampled_lps]
                advantage = rng.uniform(-1, 1)
                notes.append(
                    EpisodeNotes(
                        str(task), advantage, {0: advantage}, {0: trainer}, version_span=(step - 1, step - 1)
                    )
                )
        write_episodes(folder / "tokens", step_set(step), trajs, "train", step, notes)
        metrics.append({"step": step, "phase": "train", "peak_rss_mb": 900 + step, "reward_mean": 0.5})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return folder


def folder_size(path: Path, skip: tuple[str, ...] = ()) -> int:
    return sum(
        p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and not set(p.relative_to(path).parts) & set(skip)
    )


# bytes the page fetched since the last clear: the document and every resource
FETCHED = (
    "() => [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]"
    ".reduce((n, e) => n + e.encodedBodySize, 0)"
)


class Page:
    """The browser's page on the viewer at `url`, and the time from an action to a view drawn."""

    def __init__(self, page, url: str) -> None:
        self.page, self.url = page, url

    def timed(self, action, selector=None, changed=None) -> float:
        """Seconds from `action` to `selector` shown, or to the text of `changed` differing."""
        before = self.page.inner_text(changed) if changed else None
        started = time.perf_counter()
        action()
        if changed:
            self.page.wait_for_function(
                "([s, old]) => document.querySelector(s) && document.querySelector(s).textContent !== old",
                arg=[changed, before],
            )
        else:
            self.page.wait_for_selector(selector)
        return time.perf_counter() - started


def overview_figures(view: Page, repeat: int) -> dict:
    """The overview's first opening (the server reads the run's indexes), later ones, its bytes."""
    page, url, overview = view.page, view.url, []
    for i in range(repeat):
        overview.append(
            view.timed(
                lambda i=i: page.goto(f"{url}?load={i}#/r/0", wait_until="commit"),
                "#steps tbody tr[data-set]",
            )
        )
        page.wait_for_load_state("networkidle")
    return {
        "overview_first_s": overview[0],
        "overview_s": statistics.median(overview[1:] or overview),
        "overview_bytes": page.evaluate(FETCHED),
    }


def step_figures(view: Page, step: str, repeat: int) -> dict:
    """A step's groups and episode list, one episode token by token, and a text search."""
    page, url = view.page, view.url
    groups, episodes, opened, search, figures = [], [], [], [], {"step": step}
    for i in range(repeat):  # a fresh page each time: no filter left from the last search
        groups.append(
            view.timed(lambda i=i: page.goto(f"{url}?open={i}#/r/0/s/{step}/groups"), ".group .member")
        )
        episodes.append(view.timed(lambda: page.goto(f"{url}#/r/0/s/{step}/episodes"), "#episodes tbody tr"))
        row = page.locator("#episodes tbody tr >> nth=0")
        page.evaluate("() => performance.clearResourceTimings()")
        opened.append(view.timed(row.click, ".tokens .tok"))
        figures["episode_bytes"] = page.evaluate(
            "() => performance.getEntriesByType('resource').reduce((n, e) => n + e.encodedBodySize, 0)"
        )
        figures["episode_tokens"] = page.locator(".tokens .tok").count()
        page.goto(f"{url}?open={i}#/r/0/s/{step}/episodes")
        page.wait_for_selector("#filters")
        page.fill("#filters input[name=q]", "The answer is 7")
        search.append(view.timed(lambda: page.click("#filters button"), changed="#matched"))
    return figures | {
        "groups_s": statistics.median(groups),
        "episode_list_s": statistics.median(episodes),
        "open_episode_first_s": opened[0],
        "open_episode_s": statistics.median(opened),
        "search_s": statistics.median(search),
    }


def measure(run: Path, repeat: int) -> dict:
    from playwright.sync_api import sync_playwright

    server = subprocess.Popen(
        [sys.executable, "-m", "aworld_train.facade.cli", "view", str(run), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = server.stdout.readline().split()[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            view = Page(browser.new_page(viewport={"width": 1400, "height": 1000}), url)
            figures = overview_figures(view, repeat)
            sets = view.page.eval_on_selector_all(
                "#steps tbody tr[data-set]", "rows => rows.map(r => r.dataset.set)"
            )
            figures |= step_figures(view, sets[len(sets) // 2], repeat)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="a run folder")
    source.add_argument("--synthetic", type=int, help="make a run folder of this many episodes")
    parser.add_argument(
        "--keep", type=Path, help="where to write the synthetic run (default: a temporary folder)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    temporary = None
    if args.synthetic:
        if args.keep:
            run = args.keep
        else:
            temporary = Path(tempfile.mkdtemp(prefix="viewer-bench-"))
            run = temporary / "synthetic"
        started = time.perf_counter()
        synthetic_run(run, args.synthetic)
        print(
            f"synthetic run of {args.synthetic} episodes written in {time.perf_counter() - started:.1f}s: {run}"
        )
    else:
        run = args.run
    tokens = run / "tokens"
    print(
        f"run folder {run}: {folder_size(run) / 1e6:.2f} MB, of which tokens/ {folder_size(tokens) / 1e6:.2f} MB "
        f"(checkpoints excluded: {folder_size(run, ('checkpoints',)) / 1e6:.2f} MB with tokens, "
        f"{folder_size(run, ('checkpoints', 'tokens')) / 1e6:.2f} MB without)"
    )
    figures = measure(run, args.repeat)
    print(json.dumps(figures, indent=2))
    if temporary is not None:
        shutil.rmtree(temporary)


if __name__ == "__main__":
    main()
