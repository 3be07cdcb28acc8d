"""The report's two optional libraries, imported when a report is written: Jinja2 (the HTML, autoescaped) and
matplotlib (every plot, rendered to SVG in memory and inlined). Either missing raises one :class:`SpecError` line
saying what to install (``pip install 'overlap-planner[report]'``)."""

from __future__ import annotations

import io
import itertools

from costmodel.spec.errors import SpecError

INSTALL = "installed first: pip install 'overlap-planner[report]'"
#: rcParams of every plot: text stays text (searchable, selectable, the page's fonts), and clip-path ids are
#: salted per figure so that several inline SVGs on one page never share an id
RC = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False}
#: the SVG metadata matplotlib writes by default (creator, date, RDF type), left out: the file is reproducible
NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_salt = itertools.count()


def jinja():
    """The ``jinja2`` module, or the one-line error naming the extra."""
    try:
        import jinja2
    except ImportError:
        raise SpecError("report", "jinja2", INSTALL) from None
    return jinja2


def figure(width_in: float, height_in: float):
    """A new matplotlib ``Figure`` (no pyplot: no global figure state, no GUI backend), constrained layout."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise SpecError("report", "matplotlib", INSTALL) from None
    return Figure(figsize=(width_in, height_in), layout="constrained")


def svg_of(fig, name: str):
    """``fig`` as an SVG element to inline in HTML: matplotlib's SVG from ``<svg`` on (the XML declaration and the
    DTD line, which names a URL, are left out), marked safe for the template (matplotlib escapes its text)."""
    import matplotlib

    jinja()
    from markupsafe import Markup  # Jinja2's own dependency

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"{name}-{next(_salt)}"}):
        fig.savefig(buf, format="svg", metadata=NO_METADATA)
    text = buf.getvalue()
    return Markup(text[text.index("<svg") :])


def rc_context():
    """The report's rcParams, for the lines that build a figure."""
    import matplotlib

    return matplotlib.rc_context(RC)
