"""Write the GAIA-format sample set used by the tests and this example.

The questions are written for this project and answerable offline with the gateway's
tools (documents, Python, calculator). The layout is GAIA's own: a `metadata.jsonl`
with task_id, Question, Level, Final answer and file_name, beside the attachments.

python examples/train_gaia_with_aworld_verl/make_sample.py [OUT_DIR]
"""

from __future__ import annotations

import csv
import json
import sys
import uuid
from pathlib import Path

SALES = [
    ("North", "Widgets", 1250.50),
    ("South", "Widgets", 980.00),
    ("North", "Gadgets", 310.25),
    ("East", "Gadgets", 2200.00),
    ("South", "Gizmos", 455.75),
    ("East", "Widgets", 120.00),
]
INVENTORY = [
    {"sku": "A-100", "name": "bolt", "quantity": 240},
    {"sku": "A-101", "name": "nut", "quantity": 8},
    {"sku": "B-200", "name": "washer", "quantity": 3},
    {"sku": "B-201", "name": "hinge", "quantity": 15},
    {"sku": "C-300", "name": "spring", "quantity": 9},
]


def _task(n: int, question: str, answer: str, level: int, file_name: str = "") -> dict:
    return {
        "task_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"aworld-train/gaia-sample/{n}")),
        "Question": question,
        "Level": level,
        "Final answer": answer,
        "file_name": file_name,
        "Annotator Metadata": {"Tools": "documents, python, calculator"},
    }


def tasks() -> list[dict]:
    region_totals: dict[str, float] = {}
    for region, _, amount in SALES:
        region_totals[region] = region_totals.get(region, 0.0) + amount
    fib = [1, 1]
    while len(fib) < 20:
        fib.append(fib[-1] + fib[-2])
    return [
        _task(1, "What is 3817 multiplied by 29?", str(3817 * 29), 1),
        _task(2, "What is the total of the Amount column in the attached spreadsheet?",
              f"{sum(a for _, _, a in SALES):g}", 1, "sales.csv"),
        _task(3, "According to the attached note, what was the name of the ship the expedition sailed on?",
              "Endurance Two", 1, "expedition_note.txt"),
        _task(4, "How many items in the attached inventory have a quantity below 10?",
              str(sum(1 for it in INVENTORY if it["quantity"] < 10)), 2, "inventory.json"),
        _task(5, "In which city was the workshop described in the attached document held?",
              "Tromso", 2, "workshop_report.docx"),
        _task(6, "What budget, in euros, was approved in the attached meeting minutes?", "48500", 2,
              "minutes.pdf"),
        _task(7, "List the first five prime numbers greater than 100, separated by commas.",
              "101, 103, 107, 109, 113", 1),
        _task(8, "What is the sum of the decimal digits of 2 to the power of 100?",
              str(sum(int(d) for d in str(2**100))), 2),
        _task(9, "If the first two Fibonacci numbers are 1 and 1, what is the 20th?", str(fib[19]), 1),
        _task(10, "Which region has the highest total Amount in the attached spreadsheet?",
              max(region_totals, key=region_totals.get), 2, "sales.csv"),
    ]  # fmt: skip


def write_pdf(path: Path, lines: list[str]) -> None:
    """A one-page PDF with plain text lines (no PDF library writes text without extra deps)."""
    text = (
        "BT /F1 12 Tf 72 720 Td 16 TL "
        + " ".join(
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") '" for line in lines
        )
        + " ET"
    )
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        "/Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(text)} >>\nstream\n{text}\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


def write_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Arctic instrumentation workshop", level=1)
    document.add_paragraph(
        "The workshop was held in Tromso from 4 to 6 March, hosted by the polar institute."
    )
    table = document.add_table(rows=3, cols=2)
    for row, (key, value) in zip(
        table.rows, [("Talks", "14"), ("Attendees", "62"), ("Days", "3")], strict=True
    ):
        row.cells[0].text, row.cells[1].text = key, value
    document.save(str(path))


def write_sample(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sales.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Region", "Product", "Amount"])
        writer.writerows(SALES)
    (out / "expedition_note.txt").write_text(
        "Field note, day 12.\nThe expedition left the harbour on the Endurance Two with nine crew.\n"
        "Weather: fair. Ice reports from the previous vessel, the Polar Star, were outdated.\n"
    )
    (out / "inventory.json").write_text(json.dumps({"items": INVENTORY}, indent=2) + "\n")
    write_docx(out / "workshop_report.docx")
    write_pdf(out / "minutes.pdf", [
        "Minutes of the board meeting, 14 May",
        "Item 3: the field station renovation.",
        "The board approved a budget of 48500 euros.",
        "A proposal of 52000 euros was rejected.",
    ])  # fmt: skip
    with open(out / "metadata.jsonl", "w") as f:
        for task in tasks():
            f.write(json.dumps(task) + "\n")
    return out / "metadata.jsonl"


def write_rows(metadata: Path, out: Path, test_size: int = 3) -> None:
    """The tasks as dataset rows (train.jsonl / test.jsonl) for configs that name files."""
    from aworld_train.env.gaia.data import load_gaia

    rows = load_gaia(metadata)
    for name, part in (("train", rows[:-test_size]), ("test", rows[-test_size:])):
        with open(out / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in part)


if __name__ == "__main__":
    here = Path(__file__).parent
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "gaia_sample" / "2023" / "validation"
    metadata = write_sample(target)
    write_rows(metadata, here if len(sys.argv) == 1 else target)
    print(metadata)
