"""``explain --gantt``: a step of many micro-batches draws each layer's collectives sub-pixel (issue 42 item 9: 7,680
CP events of a 33 s step as 3 ticks); a second panel shows one micro-batch at full width, where each CP event is
its own bar. Checked on the figure as it is saved: the bars' extents in pixels, not the image."""

import pytest

from planner import cli

matplotlib = pytest.importorskip("matplotlib")  # the 'plot' extra; CI installs it
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CP_COLOR = "#937860"  # the cp category's colour in the Gantt chart
EXPLAIN = ["explain", "--model", "gpt-1.7b", "--cluster", "a100-80g", "--gpus", "8", "--global-batch", "64",
           "--seq", "8192", "--tp", "2", "--pp", "2", "--cp", "2", "--sp", "--mb", "1", "--zero", "1",
           "--recompute", "none"]  # fmt: skip


def _visible_bars(ax, color: str) -> tuple[int, int]:
    """(bars of ``color`` inside the axes' x range, distinct marks they make once bars less than one pixel
    apart merge)."""
    lo, hi = ax.get_xlim()
    spans = []
    for coll in ax.collections:
        if not len(coll.get_facecolors()) or to_hex(coll.get_facecolors()[0]) != color:
            continue
        for path in coll.get_paths():
            x0, x1 = path.vertices[:, 0].min(), path.vertices[:, 0].max()
            if x1 > lo and x0 < hi:
                a, b = ax.transData.transform([(max(x0, lo), 0), (min(x1, hi), 0)])[:, 0]
                spans.append((a, b))
    marks, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end + 1.0:
            marks += 1
        end = b if end is None else max(end, b)
    return len(spans), marks


def test_gantt_has_a_one_microbatch_panel_where_cp_events_are_distinct(tmp_path, monkeypatch, capsys):
    figures = []
    save = Figure.savefig

    def spy(fig, *args, **kwargs):
        out = save(fig, *args, **kwargs)
        figures.append(fig)
        return out

    monkeypatch.setattr(Figure, "savefig", spy)
    path = tmp_path / "step.png"
    assert cli.main([*EXPLAIN, "--gantt", str(path)]) == 0
    capsys.readouterr()
    assert path.is_file() and len(figures) == 1
    axes = figures[0].axes
    whole_bars, whole_marks = _visible_bars(axes[0], CP_COLOR)
    # the whole step: 2,496 CP events merge into a few marks (3 at this commit), as the issue saw
    assert whole_bars > 100 and whole_marks < whole_bars / 20, (whole_bars, whole_marks)
    assert len(axes) == 2, "no zoomed panel"
    bars, marks = _visible_bars(axes[1], CP_COLOR)
    assert bars >= 8 and marks >= 0.9 * bars, (bars, marks)  # one micro-batch: each CP event its own bar
    lo, hi = axes[1].get_xlim()
    assert hi - lo < (axes[0].get_xlim()[1] - axes[0].get_xlim()[0]) / 10
