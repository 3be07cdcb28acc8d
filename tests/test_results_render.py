"""Results as data: ``benchmarks/RESULTS.md`` and the README's marked figures are what
``benchmarks/results/*.json`` give, every result has the schema, and the page stays short.

The stale marks (``**Stale**``/``**Unchecked**`` lines) depend on the git tree, not on the JSON, so
the comparison leaves them out; ``python -m benchmarks.render --check`` compares them too."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import readme_blocks, render, results_io  # noqa: E402

DOCS = render.load()
RERUN = "rerun `python -m benchmarks.render` (after the benchmark that wrote the JSON)"


def test_every_result_has_the_schema():
    assert DOCS, "no result in benchmarks/results"
    for name, doc in DOCS.items():
        assert results_io.validate(doc) == [], name
        assert doc["benchmark"] == name, f"{name}.json says benchmark {doc['benchmark']!r}"


def test_results_md_is_what_the_json_gives():
    have = render.without_stale(render.OUT.read_text())
    want = render.without_stale(render.render_results(DOCS))
    assert have == want, f"benchmarks/RESULTS.md differs from benchmarks/results/*.json: {RERUN}"


def test_readme_figures_are_what_the_json_gives():
    text = render.README.read_text()
    names = readme_blocks.names_in(text)
    assert text.count("<!-- results:") == len(names) == text.count("<!-- /results:"), "an unpaired README marker"
    assert {"accuracy", "serving", "components", "bands"} <= set(names)
    want = readme_blocks.fill(text, DOCS, render.freshness)
    assert render.without_stale(text) == render.without_stale(want), f"README.md's marked figures differ: {RERUN}"


def test_results_md_is_short_by_topic_and_has_no_latest_block():
    text = render.OUT.read_text()
    assert len(text.splitlines()) < 900  # 31 results by topic (the history file held 5,000 lines)
    assert "latest" not in text.lower()
    heads = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    order = [t for t, _ in render.TOPICS]
    assert heads[: len(order)] == order


def _doc(**kw) -> dict:
    doc = {
        "benchmark": "demo",
        "title": "a demo",
        "command": "python -m benchmarks.demo --set all",
        "commit": "0000000",
        "date": "2026-12-04 10:00 UTC",
        "host": {"cores": 2, "load_avg": [1.0, 1.0, 1.0]},
        "headline": {"mean %": 3.5, "rows": 79},
        "table": [{"set": "dev", "rows": 39}],
        "targets": [{"name": "mean <= 6%", "met": True}],
        "inputs": ["costmodel"],
        "previous": None,
    }
    doc.update(kw)
    return doc


def test_validate_names_what_is_wrong():
    assert results_io.validate(_doc()) == []
    bad = _doc(targets=[{"name": "x", "met": "yes"}], date="yesterday")
    del bad["inputs"]
    problems = results_io.validate(bad)
    assert any("inputs" in p for p in problems)
    assert results_io.validate({**_doc(), "headline": {}}) == ["headline: a non-empty {name: number or text}"]
    assert any("date" in p for p in results_io.validate(_doc(date="yesterday")))
    assert any("targets" in p for p in results_io.validate(_doc(targets=[{"name": "x", "met": "yes"}])))


def test_a_moved_figure_says_what_it_was_and_where():
    prev = {"commit": "abc1234", "date": "2026-12-03 10:00 UTC", "headline": {"mean %": 3.4, "rows": 79}}
    text = "\n".join(render.entry(_doc(previous=prev)))
    assert "| mean % | 3.5 | was 3.4 at `abc1234` |" in text
    assert "| rows | 79 | same |" in text
    same = "\n".join(render.entry(_doc(previous={**prev, "headline": {"mean %": 3.5, "rows": 79}})))
    assert "No headline figure moved since `abc1234`" in same and "was " not in same


def test_unknown_commit_and_stale_inputs_are_marked():
    assert render.freshness(_doc(commit="0000000"))[0].startswith("**Unchecked**")
    head = results_io.head()
    if not results_io.known(head):
        pytest.skip("not a git checkout")
    assert render.freshness(_doc(commit=head, inputs=["no/such/path"])) == []
    first = results_io.git("rev-list", "--max-parents=0", "HEAD").split()[0]
    mark = render.freshness(_doc(commit=first, inputs=["costmodel", "no/such/path"]))
    assert mark and mark[0].startswith("**Stale**") and "`costmodel`" in mark[0] and "no/such" not in mark[0]
    page = render.render_results({"demo": _doc(commit=first, inputs=["costmodel"])})
    assert "**Stale**" in page and "**Stale**" not in render.without_stale(page)


def test_record_writes_the_schema_and_keeps_what_it_replaces(tmp_path, monkeypatch):
    kw = dict(title="a demo", inputs=["no/such/path"], directory=tmp_path, targets=[{"name": "t", "met": 1}])
    assert results_io.record("demo", ["--set", "all"], headline={"v": 1}, **kw) is None  # never inside a test run
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    results_io.record("demo", ["--set", "all"], headline={"v": 1}, **kw)
    first = json.loads((tmp_path / "demo.json").read_text())
    assert results_io.validate(first) == [] and first["previous"] is None
    assert first["command"] == "python -m benchmarks.demo --set all" and first["targets"][0]["met"] is True
    monkeypatch.setenv("BENCHMARKS_RECORD", "0")
    assert results_io.record("demo", [], headline={"v": 3}, **kw) is None
    monkeypatch.delenv("BENCHMARKS_RECORD")
    results_io.record("demo", [], headline={"v": 2}, **kw)
    second = json.loads((tmp_path / "demo.json").read_text())
    assert second["headline"] == {"v": 2} and second["command"] == "python -m benchmarks.demo"
    assert second["previous"] == {"commit": first["commit"], "date": first["date"], "headline": {"v": 1}}
    with pytest.raises(ValueError, match="headline"):
        results_io.record("demo", [], headline={}, **kw)


def test_an_unknown_block_fails_and_a_missing_result_is_said():
    with pytest.raises(KeyError):
        readme_blocks.fill("<!-- results:nope -->\n<!-- /results:nope -->", DOCS, render.freshness)
    block = readme_blocks.fill("<!-- results:accuracy -->\nold\n<!-- /results:accuracy -->", {}, render.freshness)
    assert "old" not in block and "Not recorded yet: no result for `validate_published`" in block


def test_the_readme_states_the_measured_suite_time_not_a_promise():
    """Issue 42 item 10: the README's test command is followed by the suite's measured time, rendered from
    ``benchmarks/results/suite_time.json`` (``python -m benchmarks.suite_time``), not "a few minutes"."""
    from pathlib import Path

    from benchmarks.readme_blocks import BLOCKS

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    head = text[: text.index("The first command prints")]
    assert "<!-- results:suite -->" in head and "a few minutes" not in head
    assert BLOCKS["suite"][1] == ("suite_time",)
