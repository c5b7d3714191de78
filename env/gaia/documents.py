"""Document reader MCP server for GAIA attachments: txt, md, csv, tsv, json, jsonl, docx, pdf.

Files are read only from the configured roots (`GAIA_FILES_DIR`, a list separated by
`os.pathsep`; required: the server refuses to start without it, never falling back to its
working folder). A path outside them is refused, so an agent cannot read the gateway's
own files through this tool. A file is read only as far as the answer needs: at most
`max_chars` characters (capped at `MAX_CHARS` whatever the caller asks) come back, and no
more than that is read from text files, pages or paragraphs.

Run: `aworld-train env up gaia-documents [--port N]`.
"""
# No `from __future__ import annotations` here: FastMCP reads the real annotations.

import csv
import io
import json
import os
from pathlib import Path

from mcp.server.fastmcp import FastMCP

from aworld_train.env.mcp_fixes import contain_session_errors, settings_from_env

FILES_ENV = "GAIA_FILES_DIR"
DEFAULT_MAX_CHARS = 20000
MAX_CHARS = 100_000  # the most one call returns, whatever max_chars asks
MAX_PARSED_BYTES = 32 * 2**20  # docx/pdf/json are parsed whole: larger ones are refused
TEXT_SUFFIXES = {".txt", ".md", ".log", ".py", ".xml", ".html", ".htm"}
SUPPORTED = sorted(TEXT_SUFFIXES | {".csv", ".tsv", ".json", ".jsonl", ".docx", ".pdf"})


class DocumentError(ValueError):
    pass


def file_roots(env: dict[str, str] | None = None) -> list[Path]:
    """The folders documents are read from; DocumentError when none is configured."""
    value = (env if env is not None else os.environ).get(FILES_ENV, "")
    roots = [Path(p).expanduser().resolve() for p in value.split(os.pathsep) if p.strip()]
    if not roots:
        raise DocumentError(
            f"{FILES_ENV} is not set: set it to the folder(s) of the task files (separated by "
            f"{os.pathsep!r}); documents are never read from the working folder"
        )
    return roots


def resolve_inside(path: str, roots: list[Path]) -> Path:
    """The file `path` names, relative to the first root that has it; never outside the roots."""
    if not path or not path.strip():
        raise DocumentError("path is empty; pass a file name from the task, e.g. 'data.csv'")
    candidates = [Path(path).expanduser()] if Path(path).is_absolute() else [r / path for r in roots]
    for candidate in candidates:
        resolved = candidate.resolve()
        if not any(resolved.is_relative_to(root) for root in roots):
            raise DocumentError(f"{path!r} is outside the readable folders")
        if resolved.is_file():
            return resolved
    raise DocumentError(f"no such file: {path!r}; call list_documents to see the readable files")


def _table(rows) -> str:
    return "\n".join(" | ".join(cell.strip() for cell in row) for row in rows)


class _Budget:
    """Collects text parts until `limit` characters, then says stop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str) -> bool:
        """Keep `text`; False once the budget is spent (the caller stops reading)."""
        self.parts.append(text)
        self.size += len(text) + 1
        return self.size <= self.limit

    def text(self) -> str:
        return "\n".join(self.parts)


def _read_clipped(path: Path, limit: int, encoding: str = "utf-8") -> str:
    """At most `limit` + 1 characters of a text file (the one more tells it was clipped)."""
    with path.open(encoding=encoding, errors="replace", newline="") as handle:
        return handle.read(limit + 1)


def _read_docx(path: Path, limit: int) -> str:
    import docx  # python-docx, from the [gaia] extra

    document = docx.Document(str(path))
    budget = _Budget(limit)
    for paragraph in document.paragraphs:
        if paragraph.text.strip() and not budget.add(paragraph.text):
            return budget.text()
    for table in document.tables:
        if not budget.add(_table([cell.text for cell in row.cells] for row in table.rows)):
            break
    return budget.text()


def _read_pdf(path: Path, limit: int) -> str:
    from pypdf import PdfReader  # from the [gaia] extra

    budget = _Budget(limit)
    for number, page in enumerate(PdfReader(str(path)).pages, 1):
        if not budget.add(f"[page {number}]\n{(page.extract_text() or '').strip()}"):
            break
    return budget.text()


def read_text(path: Path, limit: int = MAX_CHARS) -> str:
    """The readable text of a document, by its suffix; read no further than `limit`
    characters (the result may pass it by one part, which the caller clips)."""
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES or suffix == ".jsonl":
        return _read_clipped(path, limit)
    if suffix in (".csv", ".tsv"):
        # A row is never longer than its source text, so the first `limit` characters suffice.
        text = _read_clipped(path, limit, "utf-8-sig")
        return _table(csv.reader(io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ","))
    if suffix not in (".json", ".docx", ".pdf"):
        raise DocumentError(
            f"cannot read {suffix or 'files without a suffix'}; readable: {', '.join(SUPPORTED)}"
        )
    size = path.stat().st_size
    if size > MAX_PARSED_BYTES:
        raise DocumentError(
            f"{path.name} is {size / 2**20:.0f} MB; {suffix} files over {MAX_PARSED_BYTES // 2**20} MB are not read"
        )
    if suffix == ".json":
        return json.dumps(json.loads(path.read_text(encoding="utf-8")), indent=2, ensure_ascii=False)
    if suffix == ".docx":
        return _read_docx(path, limit)
    return _read_pdf(path, limit)


def clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return (
        text[:max_chars] + "\n[truncated: the document goes on; ask for less, or a later part, to see more]"
    )


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    server = FastMCP("documents", host=host, port=port, **settings_from_env())

    @server.tool()
    def read_document(path: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
        """Read a task's attached file (txt, md, csv, tsv, json, jsonl, docx, pdf) and return its text."""
        if max_chars < 1:
            raise DocumentError(
                f"max_chars must be at least 1 (got {max_chars}); the default is {DEFAULT_MAX_CHARS}"
            )
        limit = min(max_chars, MAX_CHARS)
        return clip(read_text(resolve_inside(path, file_roots()), limit), limit)

    @server.tool()
    def list_documents() -> str:
        """List the files that read_document can open."""
        names = sorted(
            str(p.relative_to(root))
            for root in file_roots()
            for p in root.rglob("*")
            if p.is_file() and p.suffix.lower() in SUPPORTED
        )
        return "\n".join(names) or "(no readable files)"

    return server


def serve(transport: str = "http", host: str = "127.0.0.1", port: int = 8766) -> None:
    try:
        roots = file_roots()
    except DocumentError as exc:
        raise SystemExit(f"documents server not started: {exc}") from None
    missing = [str(root) for root in roots if not root.is_dir()]
    if missing:
        raise SystemExit(f"documents server not started: {FILES_ENV} names missing folders {missing}")
    build_server(host, port).run(transport="streamable-http" if transport == "http" else "stdio")
