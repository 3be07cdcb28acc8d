"""The CP-SAT model: choose one candidate choice and a stage split that minimise the step time.

``build_model(space, options) -> (CpModel, Vars)`` assembles small modules, each adding its
constraints and returning objective terms (CP-SAT Primer, "coding patterns"):

* :func:`add_choice` — one-hot ``x[c]`` over the presolved choices (``add_exactly_one``);
* :func:`add_split` — per stage position a one-hot ``y[pos][n]`` over layer counts (``n = 0``:
  the position is absent, e.g. no middle stage when ``pp = 2``), the layer count ``n[pos]``, and
  ``first + (pp - 2) * mid + last = L`` for the chosen ``pp``; a layer count is only allowed if
  the chosen choice allows it there (multiple of ``vp``, dense layers on stage 0, fits in HBM);
* :func:`add_stage_costs` — slowest-stage variables ``T >= table_c[pos][n]`` (``m - 1/v``
  already in the table), ``D`` and ``O`` likewise (and ``F``, fine-grained activation offloading's
  reloads, where a table has them: :class:`search.tables.StageTable` ``stall_ticks``), and the
  pipeline fill ``S >= sum_pos share_c[pos][n]`` (the stages at ``pos`` together, each ``1/v`` of the
  first micro-batch, :func:`costmodel.compose.step.pipeline_s`), each enforced by ``x[c]``; objective
  ``T + S + D + O`` (``+ F``), with ``T + S + D + O >= sum_c bound_c x[c]`` from the presolve bounds. With scenarios (robust
  planning) each scenario gets its own ``T_s, D_s, O_s`` from its own tables and the objective
  is ``>= T_s + D_s + O_s`` for every one: the worst case, minimised.

All coefficients are integer ticks of the problem's one resolution (:func:`search.tables.ticks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from .candidates import Split
from .choice import Choice

POSITIONS = ("first", "mid", "last")


@dataclass
class Space:
    """What the model chooses from: presolved choices with their tables and lower bounds."""

    layers: int
    tables: dict  # Choice -> StageTable
    lower_ticks: dict  # Choice -> int
    hint: tuple | None = None  # (Choice, Split) of an incumbent
    scenarios: list = field(default_factory=list)  # more Choice -> StageTable maps: minimise the worst


@dataclass
class Vars:
    """The model's variables, and reading a solution back."""

    x: dict = field(default_factory=dict)  # Choice -> BoolVar
    y: dict = field(default_factory=dict)  # position -> {n: BoolVar}
    n: dict = field(default_factory=dict)  # position -> IntVar
    terms: dict = field(default_factory=dict)  # "T", "S", "D", "O" -> IntVar
    objective: object = None
    upper: int = 0

    def extract(self, solver: cp_model.CpSolver) -> tuple[Choice, Split, int]:
        choice = next(c for c, v in self.x.items() if solver.boolean_value(v))
        counts = {pos: int(solver.value(self.n[pos])) for pos in POSITIONS}
        return choice, Split(counts["first"], counts["mid"], counts["last"]), int(solver.value(self.objective))


def _pos(kind: str) -> str:
    return "first" if kind == "only" else kind


def add_choice(model: cp_model.CpModel, v: Vars, space: Space) -> None:
    for c in space.tables:
        v.x[c] = model.new_bool_var(f"x{len(v.x)}")
    model.add_exactly_one(v.x.values())


def add_split(model: cp_model.CpModel, v: Vars, space: Space) -> None:
    L = space.layers
    allow: dict = {pos: {} for pos in POSITIONS}  # pos -> n -> [x that allow it]
    for c, t in space.tables.items():
        kinds = {_pos(k): k for k in t.kinds}
        for pos in POSITIONS:
            if pos not in kinds:
                allow[pos].setdefault(0, []).append(v.x[c])
                continue
            for n in range(1, L + 1):
                if t.valid[kinds[pos]][n]:
                    allow[pos].setdefault(n, []).append(v.x[c])
    for pos in POSITIONS:
        v.y[pos] = {n: model.new_bool_var(f"y_{pos}{n}") for n in sorted(allow[pos])}
        model.add_exactly_one(v.y[pos].values())
        for n, y in v.y[pos].items():  # y[pos][n] => the chosen choice allows n there
            model.add_bool_or([y.Not()] + allow[pos][n])
        v.n[pos] = model.new_int_var(0, L, f"n_{pos}")
        model.add(v.n[pos] == sum(n * y for n, y in v.y[pos].items()))
    by_pp: dict = {}
    for c in space.tables:
        by_pp.setdefault(c.shape.pp, []).append(v.x[c])
    for pp, xs in by_pp.items():
        z = model.new_bool_var(f"pp{pp}")
        model.add(sum(xs) == z)
        mid = max(pp - 2, 0)
        model.add(v.n["first"] + mid * v.n["mid"] + v.n["last"] == L).only_enforce_if(z)
    for c, t in space.tables.items():  # partial recompute: some stage holds >= k layers
        k = c.recompute_layers
        if k is not None:
            big = [y for pos in POSITIONS for n, y in v.y[pos].items() if n >= k]
            model.add(sum(big) >= 1).only_enforce_if(v.x[c])


def add_stage_costs(model: cp_model.CpModel, v: Vars, space: Space, scenario: int = 0) -> list:
    """Slowest-stage terms, each ``>=`` the chosen choice's table at the chosen layer counts (of
    ``space.tables``, or with ``scenario > 0`` of ``space.scenarios[scenario - 1]``; layer counts
    are allowed by the nominal tables, memory does not depend on the scenario)."""
    tables = space.tables if scenario == 0 else space.scenarios[scenario - 1]
    tabs = {"T": "time_ticks", "D": "dp_ticks", "O": "opt_ticks"}
    if any(t.stall_ticks is not None for t in tables.values()):  # fine-grained activation offloading's reloads
        tabs["F"] = "stall_ticks"
    hi = {name: 1 for name in list(tabs) + ["S"]}
    for c, t in tables.items():
        valid = space.tables[c].valid
        for name, attr in tabs.items():
            if getattr(t, attr) is None:
                continue
            for kind in t.kinds:
                hi[name] = max(hi[name], int(getattr(t, attr)[kind][valid[kind]].max(initial=0)))
        hi["S"] = max(hi["S"], sum(int(t.sum_ticks[k][valid[k]].max(initial=0)) for k in t.kinds))
    sfx = f"_s{scenario}" if scenario else ""
    terms = {name: model.new_int_var(0, hi[name], name + sfx) for name in hi}
    if scenario == 0:
        v.terms = terms
    v.upper = max(v.upper, sum(hi.values()))
    for c, t in tables.items():
        valid = space.tables[c].valid
        fill = []
        for kind in t.kinds:
            ys = v.y[_pos(kind)]
            ok = [n for n in ys if n > 0 and valid[kind][n]]
            for name, attr in tabs.items():
                if getattr(t, attr) is None:  # a choice without the term: 0, the variable's lower bound
                    continue
                table = getattr(t, attr)[kind]
                model.add(terms[name] >= sum(int(table[n]) * ys[n] for n in ok)).only_enforce_if(v.x[c])
            fill += [int(t.sum_ticks[kind][n]) * ys[n] for n in ok]
        model.add(terms["S"] >= sum(fill)).only_enforce_if(v.x[c])
    return list(terms.values())


def build_model(space: Space, options=None) -> tuple[cp_model.CpModel, Vars]:
    """The CP-SAT model of ``space`` (options are applied by the solver, see :mod:`search.solve`)."""
    model, v = cp_model.CpModel(), Vars()
    add_choice(model, v, space)
    add_split(model, v, space)
    terms = add_stage_costs(model, v, space)
    worst = [add_stage_costs(model, v, space, s + 1) for s in range(len(space.scenarios))]
    v.objective = model.new_int_var(0, v.upper, "step")
    if not worst:
        model.add(v.objective == sum(terms))
    else:  # robust: the objective is the worst scenario's step time (t >= T_s for every scenario)
        for ts in [terms] + worst:
            model.add(v.objective >= sum(ts))
    model.add(v.objective >= sum(max(0, space.lower_ticks.get(c, 0)) * x for c, x in v.x.items()))
    model.minimize(v.objective)
    if space.hint is not None and space.hint[0] in v.x:
        hc, hs = space.hint
        for c, x in v.x.items():
            model.add_hint(x, c == hc)
        kinds = {_pos(k) for k in space.tables[hc].kinds}
        for pos in POSITIONS:
            want = hs.count(pos) if pos in kinds else 0
            for n, y in v.y[pos].items():
                model.add_hint(y, n == want)
    return model, v


def tie_break(model: cp_model.CpModel, v: Vars, optimum: int, layers: int) -> None:
    """Fix the objective at ``optimum`` and prefer the first choice and split in a fixed order,
    so equal-cost plans come back the same whatever the worker count."""
    model.clear_hints()
    model.add(v.objective == optimum)
    base = layers + 1
    order = {c: i for i, c in enumerate(sorted(v.x))}
    model.minimize(
        sum(order[c] * base**3 * x for c, x in v.x.items()) + v.n["first"] * base**2 + v.n["mid"] * base + v.n["last"]
    )
