"""The GAIA gateway as a plain process on loopback, with real tool servers behind it."""

import asyncio
import os
import signal
import time

import httpx
import pytest
from gaia_support import call_tool, list_tool_names, standard_servers, start_gateway, text_of

from aworld_train.core.errors import ConfigError
from aworld_train.env.gaia.settings import GatewaySettings


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    server = start_gateway(tmp_path_factory.mktemp("gateway"), standard_servers(), call_timeout_s=60)
    yield server
    server.stop()


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The errors inside (nested) exception groups, as the MCP client raises them."""
    if hasattr(exc, "exceptions"):  # an exception group
        return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]
    return [exc]


def health(gateway) -> dict:
    return httpx.get(f"http://{gateway.host}:{gateway.port}/health", timeout=10).json()


def test_the_gateway_runs_on_the_allocator_that_gives_memory_back(gateway):
    """bench/gateway_load.py measures RSS after release on these settings (see `_use_system_allocator`)."""
    environ = dict(
        item.split("=", 1)
        for item in open(f"/proc/{gateway.process.pid}/environ").read().split("\0")
        if "=" in item
    )
    assert environ.get("PYTHONMALLOC") == "malloc"


def test_health_reports_every_server_and_why_search_is_disabled(gateway):
    report = health(gateway)
    assert report["status"] == "ok"
    assert {name: s["status"] for name, s in report["servers"].items()} == {
        "documents": "ready", "python": "ready", "calculator": "ready", "slow": "ready", "search": "disabled",
    }  # fmt: skip
    assert "GOOGLE_API_KEY" in report["servers"]["search"]["reason"]


async def test_the_servers_header_filters_what_is_listed_and_called(gateway):
    everything = await list_tool_names(gateway.url)
    assert {"read_document", "list_documents", "run_python", "list_files", "calculate", "slow"} <= set(
        everything
    )
    assert "web_search" not in everything  # disabled
    only_calc = await list_tool_names(gateway.url, servers="calculator")
    assert sorted(only_calc) == ["calculate", "last_result"]
    two = await list_tool_names(gateway.url, servers="documents,calculator")
    assert sorted(two) == ["calculate", "last_result", "list_documents", "read_document"]

    refused = await call_tool(
        gateway.url, "run_python", {"code": "print(1)"}, episode="f", servers="calculator"
    )
    assert refused.isError and "MCP_SERVERS" in text_of(refused)
    with pytest.raises(BaseException) as refused_list:
        await list_tool_names(gateway.url, servers="calculator,nope")
    assert "unknown tool servers ['nope']" in " ".join(map(str, leaf_errors(refused_list.value)))


async def test_documents_are_read_from_the_attachments_folder_only(gateway):
    pdf = await call_tool(gateway.url, "read_document", {"path": "minutes.pdf"}, episode="d1")
    assert "48500 euros" in text_of(pdf)
    docx = await call_tool(gateway.url, "read_document", {"path": "workshop_report.docx"}, episode="d1")
    assert "Tromso" in text_of(docx) and "Attendees | 62" in text_of(docx)
    csv = await call_tool(gateway.url, "read_document", {"path": "sales.csv"}, episode="d1")
    assert "East | Gadgets | 2200.0\n" in text_of(csv)
    outside = await call_tool(
        gateway.url, "read_document", {"path": "../../../../pyproject.toml"}, episode="d1"
    )
    assert outside.isError and "outside the readable folders" in text_of(outside)


async def test_100_concurrent_episodes_keep_their_sandboxes_apart(gateway):
    async def episode(i: int) -> tuple[str, str]:
        name = f"iso-{i}"
        write = f"open('mine.txt', 'w').write({name!r})\nprint('written')"
        await call_tool(gateway.url, "run_python", {"code": write}, episode=name, servers="python")
        read = "import os\nprint(sorted(os.listdir('.')), open('mine.txt').read())"
        result = await call_tool(gateway.url, "run_python", {"code": read}, episode=name, servers="python")
        return name, text_of(result)

    results = await asyncio.gather(*(episode(i) for i in range(100)))
    for name, output in results:
        assert output.strip() == f"['mine.txt'] {name}", output


async def test_code_runs_without_network_and_within_limits(gateway):
    blocked = await call_tool(
        gateway.url, "run_python",
        {"code": "import socket\nsocket.create_connection(('127.0.0.1', 1), timeout=1)"}, episode="net",
    )  # fmt: skip
    assert "network access is disabled" in text_of(blocked)
    memory = await call_tool(gateway.url, "run_python", {"code": "x = bytearray(4 * 1024**3)"}, episode="mem")
    assert "MemoryError" in text_of(memory)


async def test_a_hanging_tool_times_out_and_the_episode_goes_on(gateway):
    started = time.monotonic()
    hung = await call_tool(gateway.url, "slow", {"seconds": 60}, episode="hang")
    assert hung.isError and "did not answer within 4s" in text_of(hung)
    assert time.monotonic() - started < 20
    again = await call_tool(gateway.url, "slow", {"seconds": 0}, episode="hang")
    assert not again.isError and text_of(again) == "done"


async def test_a_killed_backend_is_restarted(gateway):
    await call_tool(gateway.url, "calculate", {"expression": "6 * 7"}, episode="k")
    before = health(gateway)["servers"]["calculator"]
    os.kill(before["pid"], signal.SIGKILL)
    result = await call_tool(gateway.url, "calculate", {"expression": "2 + 2"}, episode="k")
    assert not result.isError and text_of(result) == "4"
    after = health(gateway)["servers"]["calculator"]
    assert after["restarts"] == before["restarts"] + 1 and after["pid"] != before["pid"]
    assert health(gateway)["status"] == "ok"


async def test_a_stdio_backend_that_crashes_mid_call_comes_back(gateway):
    crashed = await call_tool(gateway.url, "crash", {}, episode="c")
    assert crashed.isError
    result = await call_tool(gateway.url, "slow", {"seconds": 0}, episode="c")
    assert text_of(result) == "done"


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_a_missing_or_bad_bearer_token_is_refused(gateway, token):
    response = httpx.post(
        gateway.url + "/",
        headers={"Authorization": f"Bearer {token}"} if token else {},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        timeout=10,
    )
    assert response.status_code == 401
    with pytest.raises(Exception):  # noqa: B017 - the client surfaces the 401 as its own error type
        await list_tool_names(gateway.url, token=token)


def test_equal_tool_names_are_refused_unless_prefixed(tmp_path):
    servers = {"calc_a": {"run": "calculator"}, "calc_b": {"run": "calculator"}}
    with pytest.raises(RuntimeError, match="exited"):
        start_gateway(tmp_path / "plain", servers)
    log = (tmp_path / "plain" / "gateway.log").read_text()
    assert "tool names must be unique across servers" in log and "prefix_tools: true" in log

    prefixed = start_gateway(tmp_path / "prefixed", servers, prefix_tools=True)
    try:
        names = asyncio.run(list_tool_names(prefixed.url))
        assert sorted(names) == [
            "calc_a__calculate",
            "calc_a__last_result",
            "calc_b__calculate",
            "calc_b__last_result",
        ]
        result = asyncio.run(
            call_tool(prefixed.url, "calc_b__calculate", {"expression": "1 + 1"}, episode="p")
        )
        assert text_of(result) == "2"
    finally:
        prefixed.stop()


def test_gateway_settings_name_the_bad_field():
    with pytest.raises(ValueError, match="exactly one of run, url, command"):
        GatewaySettings.model_validate({"servers": {"x": {"run": "calculator", "url": "http://h/mcp"}}})
    from aworld_train.env.gaia.settings import load_settings

    with pytest.raises(ConfigError, match="does not exist"):
        load_settings("/nonexistent/servers.yaml")


async def test_a_server_that_runs_elsewhere_gets_each_episodes_id(tmp_path):
    """A `url` backend keeps MCP sessions per episode: each session's requests carry the
    episode's id, so a stateful server (here the python sandbox, which refuses calls without
    one) keeps episodes apart behind the gateway."""
    from aworld_train.env.launcher import start_server

    python = start_server(
        "gaia-python", log_path=tmp_path / "python.log", env={"GAIA_SANDBOX_DIR": str(tmp_path / "boxes")}
    )
    gateway = start_gateway(tmp_path / "gw", {"remote": {"url": python.url}})
    try:
        for episode in ("u1", "u2"):
            code = f"open('mine.txt', 'w').write({episode!r}); print(open('mine.txt').read())"
            result = await call_tool(gateway.url, "run_python", {"code": code}, episode=episode)
            assert not result.isError, text_of(result)
            assert text_of(result).strip() == episode
        listed = await call_tool(
            gateway.url, "run_python", {"code": "import os; print(os.listdir())"}, episode="u1"
        )
        assert text_of(listed).strip() == "['mine.txt']"
    finally:
        gateway.stop()
        python.stop()
