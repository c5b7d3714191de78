"""Fetch real chat templates and vocabularies for the template tests, once.

The source distribution of llama-cpp-python vendors llama.cpp, whose `models/templates/` holds
chat templates as the model vendors publish them and whose `models/ggml-vocab-*.gguf` are
vocabulary-only GGUF files. Only those are kept, in the cache folder (not committed):

    python scripts/chat_templates.py [--dest .cache/chat-templates]

A cache that is already complete is left as it is, so a second run reaches no network.
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"
NAME = SDIST.replace("==", "-")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEST = ROOT / ".cache" / "chat-templates"
KEEP = {
    "templates": "*/vendor/llama.cpp/models/templates/*.jinja",
    "vocab": "*/vendor/llama.cpp/models/ggml-vocab-*.gguf",
}
DONE = "complete"


def folder(dest: Path = DEFAULT_DEST) -> Path:
    """Where the templates (`templates/`) and vocabularies (`vocab/`) of the pinned sdist live."""
    return dest / NAME


def fetch(dest: Path = DEFAULT_DEST) -> Path:
    target = folder(dest)
    if (target / DONE).is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                SDIST,
                "-d",
                tmp,
            ],
            check=True,
        )
        (sdist,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(sdist) as archive:
            for member in archive:
                if not member.isfile():
                    continue
                for kind, pattern in KEEP.items():
                    if fnmatch.fnmatch(member.name, pattern):
                        out = target / kind / Path(member.name).name
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with archive.extractfile(member) as src:
                            out.write_bytes(src.read())
    counts = {kind: len(list((target / kind).glob("*"))) for kind in KEEP}
    if not all(counts.values()):
        raise SystemExit(f"{SDIST} held no {' or '.join(k for k, n in counts.items() if not n)}")
    (target / DONE).write_text(f"{counts}\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args()
    target = fetch(args.dest)
    print(f"chat templates and vocabularies of {SDIST} in {target}: {(target / DONE).read_text().strip()}")


if __name__ == "__main__":
    main()
