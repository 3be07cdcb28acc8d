"""``DIR/results.jsonl`` and ``DIR/results.csv``: appended as each case finishes, safe to kill.

Only the sweep's driver process writes. Each record is written to the JSONL file first, then
the CSV file, each flushed and fsynced, so a kill at any moment leaves at worst a partial last
line. :meth:`ResultStore.open` repairs that: it cuts a partial last line, drops repeated case
ids, and adds to the CSV any record the JSONL file has but the CSV missed (the CSV row is a
function of the record). The JSONL file is the source of truth for which cases are finished.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> s = ResultStore(d); s.open()
set()
>>> s.append({"case_id": "c1", "model": "m", "status": "ok", "estimate": None}); s.close()
>>> with open(s.jsonl_path, "a") as f: _ = f.write('{"case_id": "c2", "mod')   # killed mid-line
>>> ResultStore(d).open()
{'c1'}
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from costmodel.spec.errors import SpecError

from ..report import to_plain
from .schema import NAMES, SCHEMA_VERSION, csv_row

JSONL, CSV = "results.jsonl", "results.csv"


def _complete_lines(path: Path, repair: bool = True) -> list[str]:
    """Lines of ``path`` up to its last newline; with ``repair`` the file is cut there."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if repair and end != len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
    return data[:end].decode("utf-8", errors="replace").splitlines()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _csv_text(rows: list[dict], header: bool) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(NAMES), lineterminator="\n")
    if header:
        w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


class ResultStore:
    """The two result files of one sweep directory."""

    def __init__(self, out_dir: str | os.PathLike):
        self.dir = Path(out_dir)
        self.jsonl_path, self.csv_path = self.dir / JSONL, self.dir / CSV
        self._jsonl = self._csv = None

    def open(self) -> set[str]:
        """Repair both files, open them for appending, and return the finished case ids."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpecError("out", str(self.dir), f"a directory that can be created ({e.strerror})") from None
        records, rewrite = {}, False
        for line in _complete_lines(self.jsonl_path):
            try:
                rec = json.loads(line)
                cid = rec["case_id"]
            except (ValueError, KeyError, TypeError):
                rewrite = True
                continue
            if cid in records:
                rewrite = True
                continue
            records[cid] = rec
        if rewrite:
            _atomic_write(self.jsonl_path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in records.values()))

        lines = _complete_lines(self.csv_path)
        if lines and next(csv.reader([lines[0]])) != list(NAMES):
            old = {r.get("schema_version") for r in records.values()} - {None}
            was = f"schema version {', '.join(map(str, sorted(old)))}" if old else "other columns"
            raise SpecError(
                "out",
                str(self.dir),
                f"a directory whose {CSV} has schema version {SCHEMA_VERSION}'s "
                f"columns (it has {was}: choose a new --out; plots still read it)",
            )
        rows = list(csv.DictReader(lines)) if lines else []
        kept, seen = [], set()
        for r in rows:
            if r["case_id"] in records and r["case_id"] not in seen:
                seen.add(r["case_id"])
                kept.append(r)
        missing = [csv_row(rec) for cid, rec in records.items() if cid not in seen]
        if not lines or len(kept) != len(rows):
            _atomic_write(self.csv_path, _csv_text(kept + missing, header=True))
        elif missing:
            with open(self.csv_path, "a", newline="") as f:
                f.write(_csv_text(missing, header=False))
        self._jsonl = open(self.jsonl_path, "a")
        self._csv = open(self.csv_path, "a", newline="")
        return set(records)

    def append(self, record: dict) -> None:
        """Write one finished case to both files (JSONL first), flushed and fsynced."""
        rec = to_plain(record)
        for f, text in (
            (self._jsonl, json.dumps(rec, allow_nan=False) + "\n"),
            (self._csv, _csv_text([csv_row(rec)], header=False)),
        ):
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        for f in (self._jsonl, self._csv):
            if f is not None:
                f.close()
        self._jsonl = self._csv = None

    def read(self) -> list[dict]:
        """Every finished record (JSONL), in the order written."""
        return [json.loads(line) for line in _complete_lines(self.jsonl_path, repair=False)]
