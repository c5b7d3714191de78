"""The documents server: an explicit root or no start, reading clipped as it goes, max_chars capped."""

import os
import subprocess
import sys
import time

import pytest
from gaia_support import SAMPLE

from aworld_train.env.gaia import documents
from aworld_train.env.gaia.documents import MAX_CHARS, DocumentError, file_roots


def tool_text(result) -> str:
    """The text of a FastMCP in-process call_tool result (content, or (content, structured))."""
    content = result[0] if isinstance(result, tuple) else result
    return "".join(getattr(c, "text", "") for c in content)


async def read(path: str, **arguments) -> str:
    return tool_text(await documents.build_server().call_tool("read_document", {"path": path, **arguments}))


def test_without_a_files_folder_nothing_is_read_and_the_server_does_not_start(tmp_path, monkeypatch):
    monkeypatch.delenv("GAIA_FILES_DIR", raising=False)
    with pytest.raises(DocumentError, match="GAIA_FILES_DIR is not set"):
        file_roots()
    env = {k: v for k, v in os.environ.items() if k != "GAIA_FILES_DIR"}
    started = subprocess.run(
        [sys.executable, "-m", "aworld_train.env", "gaia-documents", "--port", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode != 0 and "GAIA_FILES_DIR is not set" in started.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "aworld_train.env", "gaia-documents", "--port", "0"],
        cwd=tmp_path, env={**env, "GAIA_FILES_DIR": str(tmp_path / "nope")}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert missing.returncode != 0 and "missing folders" in missing.stderr


async def test_a_huge_file_is_read_only_as_far_as_the_answer_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("GAIA_FILES_DIR", str(tmp_path))
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as handle:  # 8 GiB, sparse: reading it whole would take minutes and the memory
        handle.write(b"start of the log\n")
        handle.truncate(8 * 2**30)
    started = time.monotonic()
    text = await read("huge.txt", max_chars=200)
    assert time.monotonic() - started < 5
    assert text.startswith("start of the log\n") and "[truncated" in text
    assert len(text.split("\n[truncated")[0]) == 200

    rows = tmp_path / "rows.csv"
    with rows.open("w") as handle:
        handle.write("id,name\n" + "".join(f"{i},row {i}\n" for i in range(200_000)))
    table = await read("rows.csv", max_chars=50)
    assert table.startswith("id | name\n0 | row 0\n") and "[truncated" in table


async def test_max_chars_is_capped_by_the_server_and_must_be_positive(tmp_path, monkeypatch):
    monkeypatch.setenv("GAIA_FILES_DIR", str(tmp_path))
    (tmp_path / "big.md").write_text("x" * (3 * MAX_CHARS))
    text = await read("big.md", max_chars=10**9)
    assert len(text.split("\n[truncated")[0]) == MAX_CHARS
    with pytest.raises(Exception, match="max_chars must be at least 1"):
        await read("big.md", max_chars=0)


async def test_pdf_pages_are_read_until_the_budget_is_spent(monkeypatch):
    monkeypatch.setenv("GAIA_FILES_DIR", str(SAMPLE))
    whole = await read("minutes.pdf")
    assert "48500 euros" in whole and "[truncated" not in whole
    clipped = await read("minutes.pdf", max_chars=30)
    assert clipped.startswith("[page 1]") and "[truncated" in clipped
