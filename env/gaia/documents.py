"""Document reader MCP server for GAIA attachments: txt, md, csv, tsv, json, jsonl, docx, pdf.

Files are read only from the configured roots (`GAIA_FILES_DIR`, a list separated by
`os.pathsep`; default: the working directory). A path outside them is refused, so an
agent cannot read the gateway's own files through this tool.

Run: `aworld-train env up gaia-documents [--port N]`.
"""
# No `from __future__ import annotations` here: FastMCP reads the real annotations.

import csv
import io
import json
import os
from pathlib import Path

from mcp.server.fastmcp import FastMCP

from aworld_train.env.mcp_fixes import contain_session_errors

FILES_ENV = "GAIA_FILES_DIR"
DEFAULT_MAX_CHARS = 20000
TEXT_SUFFIXES = {".txt", ".md", ".log", ".py", ".xml", ".html", ".htm"}
SUPPORTED = sorted(TEXT_SUFFIXES | {".csv", ".tsv", ".json", ".jsonl", ".docx", ".pdf"})


class DocumentError(ValueError):
    pass


def file_roots(env: dict[str, str] | None = None) -> list[Path]:
    value = (env if env is not None else os.environ).get(FILES_ENV, "")
    roots = [Path(p).expanduser().resolve() for p in value.split(os.pathsep) if p.strip()]
    return roots or [Path.cwd().resolve()]


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


def _table(rows: list[list[str]]) -> str:
    return "\n".join(" | ".join(cell.strip() for cell in row) for row in rows)


def _read_docx(path: Path) -> str:
    import docx  # python-docx, from the [gaia] extra

    document = docx.Document(str(path))
    parts = [p.text for p in document.paragraphs if p.text.strip()]
    for table in document.tables:
        parts.append(_table([[cell.text for cell in row.cells] for row in table.rows]))
    return "\n".join(parts)


def _read_pdf(path: Path) -> str:
    from pypdf import PdfReader  # from the [gaia] extra

    pages = PdfReader(str(path)).pages
    return "\n".join(f"[page {i}]\n{(page.extract_text() or '').strip()}" for i, page in enumerate(pages, 1))


def read_text(path: Path) -> str:
    """The readable text of a document, by its suffix."""
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return path.read_text(encoding="utf-8", errors="replace")
    if suffix in (".csv", ".tsv"):
        text = path.read_text(encoding="utf-8-sig", errors="replace")
        return _table(list(csv.reader(io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ",")))
    if suffix == ".json":
        return json.dumps(json.loads(path.read_text(encoding="utf-8")), indent=2, ensure_ascii=False)
    if suffix == ".jsonl":
        return path.read_text(encoding="utf-8")
    if suffix == ".docx":
        return _read_docx(path)
    if suffix == ".pdf":
        return _read_pdf(path)
    raise DocumentError(f"cannot read {suffix or 'files without a suffix'}; readable: {', '.join(SUPPORTED)}")


def build_server(host: str = "127.0.0.1", port: int = 0) -> FastMCP:
    contain_session_errors()
    server = FastMCP("documents", host=host, port=port)

    @server.tool()
    def read_document(path: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
        """Read a task's attached file (txt, md, csv, tsv, json, jsonl, docx, pdf) and return its text."""
        text = read_text(resolve_inside(path, file_roots()))
        if len(text) > max_chars:
            return text[:max_chars] + f"\n[truncated: {len(text) - max_chars} more characters]"
        return text

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
    build_server(host, port).run(transport="streamable-http" if transport == "http" else "stdio")
