"""`aworld-train view` in a real browser: Debian's Chromium, driven by Playwright (pointed at the system
browser; nothing is downloaded), over the run folder of a short local run (conftest.py:
`tiny_local_run`) and an older folder without token files. Each test clicks through the page as a
user would and checks what it shows against what the run folder holds; every view is saved as a
screenshot in the folder the session prints (AWORLD_TRAIN_SCREENSHOTS chooses it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no system Chromium (apt-get install chromium; make setup installs it as root)"
)
TRANSPARENT = "rgba(0, 0, 0, 0)"


def token_rows(run: Path, set_name: str) -> list[dict]:
    rows = []
    for part in sorted((run / "tokens" / set_name).glob("part-*.parquet")):
        rows.extend(pq.read_table(part).to_pylist())
    return rows


@pytest.fixture(scope="module")
def folders(tiny_local_run, tmp_path_factory):
    """The shared run (read only), a copy that grows while the page is open, and a copy as runs
    were written before token files."""
    root = tmp_path_factory.mktemp("viewer")
    growing = root / "growing"
    shutil.copytree(tiny_local_run, growing, ignore=shutil.ignore_patterns("checkpoints"))
    old = root / "old-run"
    shutil.copytree(tiny_local_run, old, ignore=shutil.ignore_patterns("checkpoints", "tokens"))
    return {"run": tiny_local_run, "growing": growing, "old": old}


@pytest.fixture(scope="module")
def server(folders):
    process = subprocess.Popen(
        [sys.executable, "-m", "aworld_train.facade.cli", "view", str(folders["run"]), str(folders["growing"]),
         str(folders["old"]), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    line = process.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if found is None:
        process.kill()
        raise AssertionError(f"aworld-train view printed no URL: {line!r} {process.stdout.read()}")
    yield found.group(0)
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def shots(tmp_path_factory, request) -> Path:
    folder = Path(os.environ.get("AWORLD_TRAIN_SCREENSHOTS") or tmp_path_factory.mktemp("viewer-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"viewer screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"


def test_steps_groups_an_episode_token_by_token_and_its_drift(page, server, folders, shots):
    shows_the_runs_steps_and_drift(page, server, shots)
    rows, flat = shows_a_steps_groups(page, folders["run"], shots)
    shows_an_episode_token_by_token(page, rows, flat, shots)

    # coloured by trainer - sampler difference: the learner's logprobs were kept for this sample
    page.click("#colour-diff")
    page.wait_for_selector("#colour-diff:checked")
    assert page.locator(".segment .tok.smp.no-trainer").count() == 0
    page.screenshot(path=str(shots / "episode-difference.png"), full_page=True)

    # the drift view: the compact tool call this task's script writes renders with spaces
    page.click("#tab-drift")
    page.wait_for_selector(".drift-agent")
    differing = int(page.inner_text(".drift-differing"))
    assert differing > 0 and page.locator(".fresh .tok.diff").count() > 0
    page.screenshot(path=str(shots / "drift.png"), full_page=True)


def shows_the_runs_steps_and_drift(page, server, shots) -> None:
    """The run's page: its two steps, its charts, and the drift count once every episode is checked."""
    page.goto(server + "#/r/0")
    page.wait_for_selector("#steps tbody tr[data-set]")
    assert page.locator("#steps tbody tr[data-set]").count() == 2
    assert page.locator(".chart").count() == 6 and page.locator(".chart .greyed").count() == 0
    # the run's drift count, as the server counts it, once every episode is checked
    page.wait_for_selector("#drift-count .drift-episodes")
    page.wait_for_function("!document.querySelector('#drift-count').textContent.includes('checked')")
    assert int(page.inner_text("#drift-count .drift-episodes")) > 0
    page.screenshot(path=str(shots / "overview.png"), full_page=True)


def shows_a_steps_groups(page, run: Path, shots) -> tuple[list[dict], set]:
    """A step: its GRPO groups side by side, the group whose rewards are all equal flagged. Returns
    the step's token rows and its flat groups."""
    page.click("#steps tr[data-set='step_000001']")
    page.wait_for_selector(".group")
    rows = token_rows(run, "step_000001")
    groups = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    flat = {g for g, members in groups.items() if len({m["reward"] for m in members}) == 1}
    assert page.locator(".group").count() == len(groups)
    assert {page.locator(".group.zero").get_attribute("data-group")} == flat
    assert page.locator(".group.zero .zero-flag").count() == 1
    page.screenshot(path=str(shots / "groups.png"), full_page=True)
    return rows, flat


def shows_an_episode_token_by_token(page, rows: list[dict], flat: set, shots) -> None:
    """An episode that called the tool in the group that teaches something: its tokens, sampled and
    context, each turn's reward and advantage, its tool call's latency and status."""
    episode = next(r for r in rows if r["group"] not in flat and r["tool_calls"])
    page.click(f".member[data-episode='{episode['episode_id']}']")
    page.wait_for_selector(".tokens .tok")
    segment = episode["segments"][0]
    total = len(segment["prompt_ids"]) + len(segment["response_ids"])
    sampled = sum(segment["response_mask"])
    assert page.inner_text(".segment .n-tokens") == str(total)
    assert page.locator(".segment .tok.smp").count() == sampled
    assert page.locator(".segment .tok.ctx").count() == total - sampled
    context_style = page.eval_on_selector(
        ".segment .tok.ctx", "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]"
    )
    assert context_style == ["rgb(138, 143, 152)", TRANSPARENT]  # dimmed, and no logprob colour
    sampled_background = page.eval_on_selector(
        ".segment .tok.smp", "e => getComputedStyle(e).backgroundColor"
    )
    assert sampled_background != TRANSPARENT
    # each LLM call's mark carries the turn's reward and advantage, as the token file holds them
    assert page.locator(".segment .turn-mark").count() == len(segment["turn_starts"]) == 2
    for k, (reward, advantage) in enumerate(
        zip(segment["turn_rewards"], segment["turn_advantages"], strict=True)
    ):
        mark = f".segment .turn-mark[data-turn='{k}']"
        assert abs(float(page.inner_text(f"{mark} .turn-reward").removeprefix("r ")) - reward) <= 0.005
        assert abs(float(page.inner_text(f"{mark} .turn-advantage").removeprefix("A ")) - advantage) <= 0.0005
    call = json.loads(episode["trajectory"])["tool_calls"][0]
    latency = page.inner_text(f".tool-call[data-call='{call['id']}'] .latency")
    # whole milliseconds as the page rounds them (JavaScript rounds a half up, Python's format to even)
    assert latency.endswith(" ms") and call["latency_s"] > 0
    assert abs(int(latency.removesuffix(" ms")) - 1000 * call["latency_s"]) <= 0.5
    assert page.inner_text(f".tool-call[data-call='{call['id']}'] .status") == "ok"
    page.screenshot(path=str(shots / "episode.png"), full_page=True)


def test_filters_narrow_a_steps_episodes(page, server, folders):
    rows = token_rows(folders["run"], "step_000002")
    page.goto(server + "#/r/0/s/step_000002/episodes")
    page.wait_for_selector("#episodes tbody tr")
    assert page.inner_text("#matched") == f"{len(rows)} of {len(rows)} episodes"
    page.select_option("#filters select[name=tool]", "calculate")
    page.click("#filters button")
    page.wait_for_function(
        f"document.querySelector('#matched').textContent.startsWith('{sum(1 for r in rows if r['tool_calls'])} of')"
    )
    page.select_option("#filters select[name=tool]", "")
    page.fill("#filters input[name=q]", "The answer is 0.")
    page.fill("#filters input[name=reward_max]", "0.5")
    page.click("#filters button")
    wrong = [r for r in rows if "The answer is 0." in r["trajectory"] and r["reward"] <= 0.5]
    page.wait_for_function(f"document.querySelector('#matched').textContent.startsWith('{len(wrong)} of')")
    assert page.locator("#episodes tbody tr").count() == len(wrong) > 0


def test_two_evaluations_side_by_side(page, server, shots):
    page.goto(server + "#/compare?a=0%3Aeval%2Fbefore&b=0%3Aeval%2Fafter")
    page.wait_for_selector("#compare-tasks tbody tr")
    assert page.locator("#compare-tasks tbody tr").count() == 2  # both tasks ran in both
    page.click("#compare-tasks tbody tr >> nth=0")
    page.wait_for_selector("#pair-a .tokens .tok")
    assert page.locator("#pair-b .tokens .tok").count() > 0
    page.screenshot(path=str(shots / "compare.png"), full_page=True)


def test_a_run_still_writing_shows_its_new_step(page, server, folders):
    from aworld_train.rollout.samples.token_log import write_part

    page.goto(server + "#/r/1")
    page.wait_for_selector("#steps tbody tr[data-set]")
    assert page.locator("#steps tbody tr[data-set]").count() == 2
    rows = [{**row, "step": 3} for row in token_rows(folders["growing"], "step_000002")]
    write_part(folders["growing"] / "tokens" / "step_000003", rows)
    page.wait_for_selector("#steps tr[data-set='step_000003']", timeout=10_000)


def test_a_run_folder_without_token_files_opens_with_the_token_views_greyed(page, server, shots):
    page.goto(server + "#/r/2")
    page.wait_for_selector("#steps tbody tr[data-set]")
    assert page.is_visible("#no-tokens")
    page.click("#steps tr[data-set='step_000001']")
    page.wait_for_selector(".member")
    page.click(".member >> nth=0")
    page.wait_for_selector("#tokens-greyed")
    assert page.is_disabled("#tab-drift")
    assert page.locator(".messages .msg").count() > 0  # the conversation as text, still there
    page.screenshot(path=str(shots / "old-run-episode.png"), full_page=True)
