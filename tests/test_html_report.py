"""The HTML report (issue 41, planner/html_report): one self-contained file for a recommend answer, an evaluated plan
and a sweep; user strings escaped; and the page as a person sees it, loaded in headless Chromium (Debian's package;
skipped with a clear message where it is not installed)."""

import dataclasses
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")

from costmodel.spec.errors import SpecError  # noqa: E402
from costmodel.spec.presets import load_model  # noqa: E402
from costmodel.spec.workload import Workload  # noqa: E402
from planner.api import evaluate, recommend  # noqa: E402
from planner.html_report import render_html, write_report  # noqa: E402
from planner.html_report.sweep_view import pareto_groups  # noqa: E402
from planner.sweep import ResultStore  # noqa: E402

#: the README's Python example (Planner(model="llama3-8b", cluster="h100-sxm", gpus=64, global_batch=512, seq=4096))
MODEL, CLUSTER, GPUS, BATCH, SEQ = "llama3-8b", "h100-sxm", 64, 512, 4096
WORKLOAD = Workload(global_batch=BATCH, seq_len=SEQ)
#: a src or href that would fetch something: a scheme-relative or http(s) URL
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.I)


def degrees(c) -> str:
    return f"tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp} ep={c.ep} vp={c.vp} mb={c.mb}"


@pytest.fixture(scope="module")
def answer():
    return recommend(MODEL, CLUSTER, gpus=GPUS, global_batch=BATCH, seq=SEQ, top_k=3, time_limit_s=10, rescore=True)


@pytest.fixture(scope="module")
def page(answer, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "plan.html"
    out = write_report(
        path,
        result=answer,
        model=MODEL,
        cluster=CLUSTER,
        workload=WORKLOAD,
        objectives={"train_tokens": 1e12},
        baseline="tp=2,pp=1,mb=1,zero=1",
    )
    assert out == path and path.is_file()
    return path


def test_recommend_report_shows_the_plan_its_launch_lines_and_svgs(answer, page):
    html = page.read_text()
    best = answer.best.config
    assert degrees(best) in html
    assert f"--tensor-model-parallel-size {best.tp}" in html and f"--micro-batch-size {best.mb}" in html
    # breakdown, memory, timeline, lost time: matplotlib's SVG inline, no image files beside it
    assert html.count("<svg") >= 4 and "<img" not in html
    for section in (
        "plan",
        "launch",
        "step",
        "memory",
        "timeline",
        "runner-ups",
        "baseline",
        "objectives",
        "assumptions",
    ):
        assert f'id="{section}"' in html, section
    for label in ("best", "#2"):
        assert f"<td>{label}</td>" in html
    assert "goodput" in html and "Daly 2006" in html and "mcore-2025" in html


def test_the_file_needs_no_network(page):
    html = page.read_text()
    assert not EXTERNAL.findall(html), EXTERNAL.findall(html)[:3]
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "<!DOCTYPE svg" not in html  # matplotlib's DTD line names a URL: left out


def test_user_strings_are_escaped(tmp_path):
    evil = "<b onmouseover=alert(1)>x</b>"
    model = dataclasses.replace(load_model(MODEL), name=evil)
    e = evaluate(model, CLUSTER, gpus=8, global_batch=16, seq=2048, tp=8)
    html = render_html(
        estimate=e,
        model=model,
        cluster=CLUSTER,
        workload=Workload(global_batch=16, seq_len=2048),
        title="<script>alert('t')</script>",
        timeline=False,
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert evil not in html and "&lt;b onmouseover=alert(1)&gt;x&lt;/b&gt;" in html


def test_evaluate_report_of_the_readme_example(tmp_path):
    e = evaluate(
        "gpt3-175b", "a100-80g", gpus=64, global_batch=64, seq=2048, tp=8, pp=8, vp=3, sp=True, recompute="selective"
    )
    path = write_report(
        tmp_path / "sub" / "eval.html",
        estimate=e,
        model="gpt3-175b",
        cluster="a100-80g",
        workload=Workload(global_batch=64, seq_len=2048),
    )
    html = path.read_text()
    assert "tp=8 pp=8 dp=1" in html and "evaluate" in html
    assert html.count("<svg") == 3  # breakdown, memory (8 stages), timeline
    assert 'id="runner-ups"' not in html and "--pipeline-model-parallel-size 8" in html
    assert not EXTERNAL.findall(html)


def test_infeasible_answer_says_why():
    r = recommend("llama3-70b", "h100-sxm", gpus=1, global_batch=8, seq=4096)
    html = render_html(
        result=r, model="llama3-70b", cluster="h100-sxm", workload=Workload(global_batch=8, seq_len=4096)
    )
    assert "INFEASIBLE" in html and "no plan fits in memory" in html


def _row(model, gpus, step, tokens_per_s, **kw):
    return {
        "case_id": f"{model}-{gpus}-{step}",
        "model": model,
        "cluster": "h100-sxm",
        "gpus": gpus,
        "global_batch": 64,
        "seq": 2048,
        "dtype": "bf16",
        "status": "ok",
        "tp": 1,
        "pp": 1,
        "dp": gpus,
        "ep": 1,
        "cp": 1,
        "vp": 1,
        "mb": 1,
        "zero": 1,
        "recompute": "none",
        "step_time_s": step,
        "tokens_per_s": tokens_per_s,
        "mfu": 0.4,
        "peak_memory_bytes": 5e10,
        "estimate": None,
        **kw,
    }


def test_sweep_pareto_fronts():
    rows = [_row("m", 8, 4.0, 32768.0), _row("m", 16, 2.1, 62415.0), _row("m", 32, 2.5, 52429.0)]
    ((label, pts),) = pareto_groups(rows)
    assert label == "m, 64 x 2048 tokens"
    assert [p["front_gpus"] for p in pts] == [True, True, False]  # 32 GPUs: slower than 16
    assert [p["front_cost"] for p in pts] == [True, True, False]  # 32 GPUs: dearer and slower than 16


def test_sweep_report_from_its_directory_escapes_names(tmp_path):
    store = ResultStore(tmp_path / "out")
    store.open()
    for r in (
        _row("<img src=x onerror=alert(1)>", 8, 4.0, 32768.0),
        _row("<img src=x onerror=alert(1)>", 16, 2.1, 62415.0),
        {
            "case_id": "bad",
            "model": "x",
            "cluster": "h100-sxm",
            "gpus": 8,
            "status": "infeasible",
            "reason": "no plan fits <in> memory",
            "estimate": None,
        },
    ):
        store.append(r)
    store.close()
    html = write_report(tmp_path / "sweep.html", sweep_rows=tmp_path / "out").read_text()
    assert "Pareto front" in html and html.count("<svg") == 1 and 'id="sweep-table"' in html
    assert (
        "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html and "no plan fits &lt;in&gt; memory" in html
    )
    assert not EXTERNAL.findall(html)


def test_bad_arguments_are_one_line_spec_errors(answer, tmp_path):
    with pytest.raises(SpecError, match="exactly one of result, estimate or sweep_rows"):
        render_html(result=answer, sweep_rows=[])
    with pytest.raises(SpecError, match="model=None"):
        render_html(result=answer, cluster=CLUSTER, workload=WORKLOAD)
    with pytest.raises(SpecError, match="train_tokens"):
        render_html(
            result=answer, model=MODEL, cluster=CLUSTER, workload=WORKLOAD, objectives={"pue": 1.2}, timeline=False
        )
    with pytest.raises(SpecError, match="a writable file path"):
        write_report(tmp_path, sweep_rows=[])  # a directory


def test_missing_jinja2_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 raises ImportError
    with pytest.raises(SpecError, match=r"pip install 'overlap-planner\[report\]'"):
        render_html(sweep_rows=[])


# --------------------------------------------------------------------------- in a browser
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)  # no name resolves: a fetch would fail and be logged


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    return path


def _run(args: list, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            _chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_page_loads_in_chromium_and_shows_the_plan(answer, page, tmp_path):
    url = page.resolve().as_uri()
    dom = _run(["--dump-dom", url], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "</html>" in dom.stdout and degrees(answer.best.config) in dom.stdout
    assert dom.stdout.count("<svg") >= 4 and "Launch lines" in dom.stdout
    # nothing failed to load and no console message: the page asked the network for nothing
    assert not re.search(r"net::ERR_|Failed to load resource|CONSOLE", dom.stderr), dom.stderr[-2000:]
    png = tmp_path / "report.png"
    shot = _run([f"--screenshot={png}", "--window-size=1280,2000", "--hide-scrollbars", url], tmp_path)
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a page with text and plots, not a blank one
