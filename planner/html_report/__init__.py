"""One self-contained HTML report (issue 41) of a recommend answer, an evaluated plan or a sweep.

:func:`write_report` writes it: the plan and its launch lines, the step-time breakdown with its band and where each
number comes from, memory per stage, the overlap timeline of one step (the op-graph trace's events), the runner-ups
and "why not" the user's baseline, the objectives of the run (:mod:`costmodel.objectives`), a sweep's Pareto front,
and the assumptions. HTML from Jinja2 templates (``templates/``, autoescaped), plots from matplotlib as inline SVG:
the file opens with no network access. Both libraries are the ``report`` extra (``pip install
'overlap-planner[report]'``); without them :func:`write_report` raises a one-line :class:`SpecError`.

* :mod:`~planner.html_report.render`: :func:`write_report`, :func:`render_html` and the template context;
* :mod:`~planner.html_report.plan_view`: one plan; :mod:`~planner.html_report.sections`: the search, baseline,
  objectives and assumptions; :mod:`~planner.html_report.sweep_view`: a sweep and its Pareto fronts;
* :mod:`~planner.html_report.plots`: the matplotlib figures; :mod:`~planner.html_report.deps`: the optional imports.
"""

from .render import render_html, write_report

__all__ = ["render_html", "write_report"]
