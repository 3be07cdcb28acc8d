"""``recommend --mode infer --plot FILE``: the Pareto plot's labels do not overlap (their text boxes, as matplotlib
draws them) and the command says in one line which file it wrote (issue 42 item 9)."""

import itertools
import json

import pytest

from planner import cli

matplotlib = pytest.importorskip("matplotlib")  # the 'plot' extra; CI installs it
from matplotlib.figure import Figure  # noqa: E402

SERVE = ["recommend", "--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "4",
         "--input-len", "1024", "--output-len", "256", "--time-limit", "2"]  # fmt: skip


@pytest.fixture
def saved(monkeypatch):
    """The text boxes (display coordinates) of every figure saved, taken as it is saved."""
    boxes = []
    save = Figure.savefig

    def spy(fig, *args, **kwargs):
        out = save(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        boxes.append([(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes for t in ax.texts])
        return out

    monkeypatch.setattr(Figure, "savefig", spy)
    return boxes


def test_plot_labels_do_not_overlap_and_the_file_is_named(capsys, tmp_path, saved):
    path = tmp_path / "pareto.png"
    assert cli.main([*SERVE, "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    assert path.is_file() and path.stat().st_size > 1000
    lines = [ln for ln in out.splitlines() if str(path) in ln]
    assert len(lines) == 1 and lines[0].startswith(f"plot: wrote {path}"), lines
    front = [ln for ln in out.split("Pareto front", 1)[1].splitlines() if ln.startswith("-  ")]
    assert len(saved) == 1
    labels = saved[0]
    assert len(labels) >= max(3, len(front) // 2), (len(labels), len(front))  # most plans labelled, not dropped
    for (ta, a), (tb, b) in itertools.combinations(labels, 2):
        assert not a.overlaps(b), (ta, tb)


def test_plot_line_goes_to_stderr_with_json(capsys, tmp_path):
    path = tmp_path / "front.png"
    assert cli.main([*SERVE, "--plot", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout: exactly one JSON object
    assert path.is_file()
    assert [ln for ln in err.splitlines() if ln.startswith(f"plot: wrote {path}")], err
