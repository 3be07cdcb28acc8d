"""Write ``benchmarks/RESULTS.md`` and the README's marked figures from ``benchmarks/results/*.json`` only.

    python -m benchmarks.render [--check]

RESULTS.md lists every recorded benchmark by topic, in a fixed order, each with its command,
commit, date, host, headline figures ("was X at <commit>" where the result it replaced differs),
targets and summary table. A figure is marked **Stale** when files among its ``inputs`` differ
between its commit and the working tree (``git diff --quiet <commit> -- <inputs>``), and
**Unchecked** when its commit is unknown to git. The README's figures sit between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``; the text between is rewritten by
:mod:`benchmarks.readme_blocks`. ``--check`` writes nothing and exits 1 when either file differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchmarks import readme_blocks
from benchmarks.results_io import RESULTS, ROOT, changed, known

OUT = Path(__file__).resolve().parent / "RESULTS.md"
README = ROOT / "README.md"
HISTORY = "notes/2026-12-04-results-history.md"
MAX_ROWS = 16  # summary rows shown per benchmark; the JSON keeps them all
#: topic -> [(benchmark, the command that records it)], in the order the page shows them
TOPICS = [
    (
        "Training accuracy",
        [
            ("validate_published", "python -m benchmarks.validate_published --set all"),
            ("validate_published_analytic", "python -m benchmarks.validate_published --set all --engine analytic"),
            ("validate_published_sealed", "python -m benchmarks.validate_published --set sealed"),
        ],
    ),
    (
        "Serving accuracy",
        [
            ("validate_inference", "python -m benchmarks.validate_inference"),
            ("validate_inference_sealed", "python -m benchmarks.validate_inference --sealed"),
        ],
    ),
    (
        "Components",
        [
            ("component_kernels", "python -m benchmarks.component_kernels --model kernel"),
            ("component_kernels_preset", "python -m benchmarks.component_kernels"),
            ("component_collectives", "python -m benchmarks.component_collectives"),
            ("component_collectives_formula", "python -m benchmarks.component_collectives --formula-vs-tables"),
            ("component_memory", "python -m benchmarks.component_memory"),
            ("component_mechanics", "python -m benchmarks.component_mechanics"),
            ("component_ep", "python -m benchmarks.component_ep"),
            ("component_routing", "python -m benchmarks.component_routing"),
            ("component_tables", "python -m benchmarks.component_tables"),
            ("kernel_regimes", "python -m benchmarks.kernel_regimes"),
        ],
    ),
    ("Engine agreement", [("engine_agreement", "python -m benchmarks.engine_agreement")]),
    ("Bands", [("band_coverage", "python -m benchmarks.band_coverage --set all")]),
    (
        "Search optimality and speed",
        [
            ("search_equality", "python -m benchmarks.search_equality --instances 200 --seed 0"),
            ("layout_equality", "python -m benchmarks.layout_equality --instances 100"),
            ("search_speed", "python -m benchmarks.search_speed"),
            ("search_speed_vs_base", "python -m benchmarks.search_speed_vs_base"),
            ("rack_scale", "python -m benchmarks.rack_scale"),
            ("recommend_vs_published", "python -m benchmarks.recommend_vs_published --set all"),
            ("pinned_recommend", "python -m benchmarks.pinned_recommend --set all"),
            ("evaluate_partial", "python -m benchmarks.evaluate_partial --set all"),
        ],
    ),
    (
        "Emitted flags",
        [
            ("flags_roundtrip", "python -m benchmarks.flags_roundtrip"),
            ("emit_roundtrip_other", "python -m benchmarks.emit_roundtrip_other"),
        ],
    ),
    (
        "API and sweep speed",
        [
            ("eval_speed", "python -m benchmarks.eval_speed"),
            ("api_speed", "python -m benchmarks.api_speed"),
            ("sweep_speed", "python -m benchmarks.sweep_speed"),
        ],
    ),
    ("Test suite", [("suite_time", "python -m benchmarks.suite_time")]),
]
STALE_MARK = re.compile(r"\n\n[ \t]*\*\*(?:Stale|Unchecked)\*\*[^\n]*")


def load(directory: Path = RESULTS) -> dict[str, dict]:
    """{benchmark: document} of every ``*.json`` in ``directory``."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def esc(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 1e4 else str(v)
    return "-" if v is None else esc(v)


def freshness(doc: dict) -> list[str]:
    """The stale mark of one result ([] when its inputs match its commit)."""
    commit = doc["commit"]
    if not known(commit):
        return [f"**Unchecked**: commit `{commit}` is unknown to this git repository; freshness not checked."]
    moved = changed(commit, doc["inputs"])
    if moved:
        return [f"**Stale**: {', '.join(f'`{p}`' for p in moved)} changed since `{commit}`: rerun the command."]
    return []


def moved_since(doc: dict) -> dict[str, str]:
    """{headline name: "was X at <commit>"} for the figures that differ from the replaced result."""
    prev = doc.get("previous")
    if not prev:
        return {}
    old = prev["headline"]
    return {
        k: f"was {cell(old[k])} at `{prev['commit']}`" if k in old else f"new since `{prev['commit']}`"
        for k, v in doc["headline"].items()
        if old.get(k, object()) != v
    }


def table(rows: list[dict], limit: int = MAX_ROWS) -> list[str]:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(map(esc, cols)) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows[:limit]]
    if len(rows) > limit:
        out.append(f"\n({len(rows) - limit} more rows in the JSON.)")
    return out


def entry(doc: dict) -> list[str]:
    h = doc["host"]
    load_avg = "/".join(f"{x:.1f}" for x in h["load_avg"])
    meta = f"`{doc['command']}` · commit `{doc['commit']}` · {doc['date']} · {h['cores']} cores, load {load_avg}" + (
        f" · {doc['wall_s']:.{0 if doc['wall_s'] >= 10 else 1}f} s" if "wall_s" in doc else ""
    )
    out = [f"### {doc['benchmark']}: {doc['title']}", "", meta, ""]
    was = moved_since(doc)
    prev = doc.get("previous")
    out += ["| figure | value | previous run |", "|---|---|---|"]
    out += [f"| {esc(k)} | {cell(v)} | {was.get(k, 'same' if prev else '-')} |" for k, v in doc["headline"].items()]
    if prev and not was:
        out += ["", f"No headline figure moved since `{prev['commit']}` ({prev.get('date', '?')})."]
    if doc["targets"]:
        out += [
            "",
            "Targets: "
            + "; ".join(f"{t['name']}: {'**met**' if t['met'] else '**NOT met**'}" for t in doc["targets"])
            + ".",
        ]
    if doc.get("dirty"):
        out += ["", f"Run with uncommitted changes in {', '.join(f'`{p}`' for p in doc['dirty'])}."]
    fresh = freshness(doc)
    if fresh:
        out += [""] + fresh
    if doc["table"]:
        out += [""] + table(doc["table"])
    return out + [""]


def render_results(docs: dict[str, dict]) -> str:
    placed = {n for _, names in TOPICS for n, _ in names}
    topics = TOPICS + (
        [("Other", [(n, docs[n]["command"]) for n in sorted(docs) if n not in placed])] if set(docs) - placed else []
    )
    out = [
        "# Benchmark results",
        "",
        "Generated by `python -m benchmarks.render` from `benchmarks/results/*.json`, which the benchmarks "
        "write (`benchmarks/results_io.py`); do not edit by hand. Rerun a benchmark's command to refresh its "
        "figures, then rerun the renderer. A figure is marked stale when files it measures (its inputs) changed "
        "since the commit it ran at. Earlier hand-written results, in the order they were written: "
        f"[`{HISTORY}`]({HISTORY}).",
        "",
    ]
    out += [f"- [{t}](#{t.lower().replace(' ', '-')})" for t, _ in topics] + [""]
    for topic, names in topics:
        out += [f"## {topic}", ""]
        missing = [cmd for n, cmd in names if n not in docs]
        for n, _ in names:
            if n in docs:
                out += entry(docs[n])
        if missing:
            out += ["Not recorded yet: " + "; ".join(f"`{c}`" for c in missing) + ".", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def without_stale(text: str) -> str:
    """``text`` less its stale marks (each follows a blank line; they depend on the git tree, not on the JSON)."""
    return STALE_MARK.sub("", text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if RESULTS.md or README.md differ")
    args = ap.parse_args(argv)
    docs = load()
    results = render_results(docs)
    readme = readme_blocks.fill(README.read_text(), docs, freshness)
    stale = [p for p, new in ((OUT, results), (README, readme)) if not p.exists() or p.read_text() != new]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} differs from what benchmarks/results/*.json give", file=sys.stderr)
        return 1 if stale else 0
    for p, new in ((OUT, results), (README, readme)):
        if p in stale:
            p.write_text(new)
            print(f"wrote {p.relative_to(ROOT)}")
    print(f"{len(docs)} results, {len(results.splitlines())} lines in {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
