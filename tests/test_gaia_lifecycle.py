"""The gateway around its episodes and processes: Host/Origin, episode ids, release, a tool
server's restart, its environment, "busy" past max_sessions, and every way of stopping."""

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from gaia_support import TOKEN, call_tool, start_gateway, text_of

AUTH = {"Authorization": f"Bearer {TOKEN}"}
MCP = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
SERVERS = {"python": {"run": "gaia-python"}, "calculator": {"run": "calculator"}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    server = start_gateway(tmp_path_factory.mktemp("lifecycle"), SERVERS, env={"OTHER_API_KEY": "k-123"})
    yield server
    server.stop()


def health(gateway) -> dict:
    return httpx.get(gateway.base + "/health", timeout=10).json()


def alive(pid: int) -> bool:
    """Running (not a zombie waiting for its parent to read its status)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize(
    "forged",
    [{"Host": "attacker.example"}, {"Host": "attacker.example:8080"}, {"Origin": "http://attacker.example"}],
)
def test_a_forged_host_or_origin_is_refused_on_every_route(gateway, forged):
    for method, path in [("POST", "/mcp"), ("GET", "/health"), ("DELETE", "/episodes/e")]:
        body = LIST if method == "POST" else None
        response = httpx.request(method, gateway.base + path, headers={**AUTH, **MCP, **forged}, json=body)
        # the SDK's transport security: 421 for a host; 403 for an origin (400 in mcp 1.10)
        if "Host" in forged:
            assert (response.status_code, response.text) == (421, "Invalid Host header"), (method, path)
        else:
            assert response.status_code in (400, 403) and response.text == "Invalid Origin header", (
                method,
                path,
            )
    own_origin = {"Origin": f"http://127.0.0.1:{gateway.port}"}
    allowed = httpx.post(gateway.url, headers={**AUTH, **MCP, **own_origin}, json=LIST, timeout=10)
    assert allowed.status_code == 200 and "run_python" in allowed.text


async def test_a_tool_call_without_an_episode_id_is_refused(gateway):
    refused = await call_tool(gateway.url, "calculate", {"expression": "1 + 1"})
    assert refused.isError and "X-Episode-Id" in text_of(refused)
    answered = await call_tool(gateway.url, "calculate", {"expression": "1 + 1"}, episode="named")
    assert not answered.isError and text_of(answered) == "2"


async def test_release_closes_the_episodes_sessions_and_removes_its_folder(gateway):
    episode = "release-me"
    await call_tool(
        gateway.url, "run_python", {"code": "open('release.txt', 'w').write('x')"}, episode=episode
    )
    await call_tool(gateway.url, "calculate", {"expression": "2 + 2"}, episode=episode)
    folders = [p for p in gateway.sandbox_root.iterdir() if (p / "release.txt").exists()]
    assert len(folders) == 1
    before = health(gateway)["sessions"]

    assert httpx.delete(f"{gateway.base}/episodes/{episode}").status_code == 401  # the token guards it too
    released = httpx.delete(f"{gateway.base}/episodes/{episode}", headers=AUTH, timeout=10)
    assert released.status_code == 200 and released.json() == {"closed_sessions": 2}
    assert health(gateway)["sessions"] == before - 2
    assert not folders[0].exists()
    again = httpx.delete(f"{gateway.base}/episodes/{episode}", headers=AUTH, timeout=10)
    assert again.json() == {"closed_sessions": 0}
    fresh = await call_tool(gateway.url, "list_files", {}, episode=episode)
    assert text_of(fresh) == "(no files yet)"


async def test_an_episodes_files_survive_a_python_server_restart(gateway):
    write = "open('survivor.txt', 'w').write('still here')"
    await call_tool(gateway.url, "run_python", {"code": write}, episode="restart")
    before = health(gateway)["servers"]["python"]
    os.kill(before["pid"], signal.SIGKILL)
    assert wait_until(lambda: health(gateway)["servers"]["python"]["restarts"] == before["restarts"] + 1, 60)
    read = await call_tool(
        gateway.url, "run_python", {"code": "print(open('survivor.txt').read())"}, episode="restart"
    )
    assert not read.isError and text_of(read).strip() == "still here"
    other = await call_tool(gateway.url, "list_files", {}, episode="someone-else")
    assert "survivor.txt" not in text_of(other)


async def test_tool_servers_and_sandboxed_code_never_see_the_gateways_secrets(gateway):
    for name in ("python", "calculator"):
        environ = Path(f"/proc/{health(gateway)['servers'][name]['pid']}/environ").read_bytes()
        assert b"GAIA_GATEWAY_TOKEN" not in environ and TOKEN.encode() not in environ
        assert b"OTHER_API_KEY" not in environ
    seen = await call_tool(
        gateway.url, "run_python", {"code": "import os\nprint(dict(os.environ))"}, episode="env"
    )
    assert "HOME" in text_of(seen)
    assert TOKEN not in text_of(seen) and "GAIA_GATEWAY_TOKEN" not in text_of(seen)
    assert "k-123" not in text_of(seen)


def test_past_max_sessions_a_new_episode_is_told_busy_at_once(tmp_path):
    gateway = start_gateway(tmp_path, {"calculator": {"run": "calculator"}}, max_sessions=2)
    try:

        async def calc(episode: str):
            return await call_tool(gateway.url, "calculate", {"expression": "3 * 3"}, episode=episode)

        assert [text_of(asyncio.run(calc(e))) for e in ("a", "b")] == ["9", "9"]
        started = time.monotonic()
        busy = asyncio.run(calc("c"))
        assert busy.isError and "busy" in text_of(busy) and "max_sessions" in text_of(busy)
        assert time.monotonic() - started < 10
        assert text_of(asyncio.run(calc("a"))) == "9"  # an open episode goes on
        httpx.delete(f"{gateway.base}/episodes/a", headers=AUTH, timeout=10)
        assert text_of(asyncio.run(calc("c"))) == "9"
    finally:
        gateway.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_every_way_of_stopping_ends_every_child_and_removes_episode_folders(tmp_path, signum):
    gateway = start_gateway(tmp_path, SERVERS, token=None)
    try:
        asyncio.run(call_tool(gateway.url, "run_python", {"code": "open('x', 'w').write('1')"}, episode="s"))
        root = gateway.sandbox_root
        assert any(root.iterdir())
        children = [s["pid"] for s in health(gateway)["servers"].values()]
        gateway.process.send_signal(signum)
        gateway.process.wait(30)
        assert wait_until(lambda: not any(alive(pid) for pid in children), 15), children
        assert wait_until(lambda: not root.exists(), 15)
    finally:
        gateway.stop()
