"""A sweep's grid: models x clusters x GPU counts x global batches x sequence lengths x what-ifs.

The grid comes from flags (comma-separated values) or a YAML/JSON file with the same keys
(``global_batch`` or ``global-batch``; a scalar or a list each). :meth:`Grid.cases` expands it
into :class:`Case` objects, each with a deterministic :attr:`Case.id` (a hash of its inputs
and the solver options), which is what makes a sweep resumable.

``framework`` (``megatron``, ``deepspeed``, ``fsdp2``) and ``grad_dtype`` (``fp32``, ``bf16``,
``fp16``) are the software every plan of a case runs (default: Megatron-Core, FP32 gradients; a
case at the defaults keeps the id it had before they were axes).

Hardware what-ifs change the cluster before planning: ``dma_engines`` (engine count of every
engine class that carries collectives; it matters only for classes with a per-engine
bandwidth), ``nvlink_gbps`` and ``nic_gbps`` (link bandwidth per GPU, GB/s) and ``hbm_gib``.

>>> g = grid_from_mapping({"models": "llama3-8b,gpt3-5b", "gpus": [8, 16], "global_batch": 64,
...                        "seq": 2048, "clusters": "h100-sxm"})
>>> len(g.cases()), g.cases()[0].inputs()["gpus"]
(4, 8)
>>> g.cases()[0].id == grid_from_mapping(g.to_mapping()).cases()[0].id
True
>>> grid_from_mapping({"models": "llama3-8b", "gpus": "eight", "global_batch": 64, "seq": 2048,
...                    "clusters": "h100-sxm"})
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: gpus='eight': must be positive integers (a list, or comma-separated)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from costmodel.spec.plan_checks import GRAD_DTYPES
from costmodel.spec.bounds import MAX_HBM_BYTES, MAX_SPEC_FILE_BYTES, RANGES, read_text_file
from costmodel.spec.errors import SpecError
from costmodel.spec.hardware import MAX_DMA_ENGINES
from costmodel.spec.plan_checks import DEFAULT_FRAMEWORK, FRAMEWORKS
from search.options import ANSWER_OPTIONS
from costmodel.spec.specs import ClusterSpec, ModelSpec
from costmodel.spec.workload import Workload
from costmodel.spec.units import DTYPES, GB, GiB

from ..problem import make_workload, resolve_cluster, resolve_model

#: grid keys with the type of one value and whether the key is required
AXES = {
    "models": ("name", True),
    "clusters": ("name", True),
    "gpus": ("int", True),
    "global_batch": ("int", True),
    "seq": ("int", True),
    "dtype": ("dtype", False),
    "dma_engines": ("int", False),
    "nvlink_gbps": ("float", False),
    "nic_gbps": ("float", False),
    "hbm_gib": ("float", False),
    "framework": ("framework", False),
    "grad_dtype": ("grad_dtype", False),
}
#: the software inputs' defaults (left out of a case's id)
SOFTWARE_DEFAULTS = {"framework": DEFAULT_FRAMEWORK, "grad_dtype": "fp32"}
#: solver options: part of every case's id (a different time limit is a different case)
OPTIONS = {"time_limit_s": ("float", ANSWER_OPTIONS.time_limit_s)}  # planner recommend's (search.options)
#: how a sweep runs (not part of a case): may sit in the grid file, flags override them
RUN_KEYS = ("out", "workers", "backend", "address")
ALIASES = {"model": "models", "cluster": "clusters", "batch": "global_batch", "time_limit": "time_limit_s"}

#: the what-ifs' sanity bounds, in their own units: the cluster files' (costmodel.spec.bounds.RANGES, MAX_HBM_BYTES,
#: costmodel.spec.hardware.MAX_DMA_ENGINES), so a what-if is refused at the grid as the same value in a file would be
WHATIF_RANGES = {
    "nvlink_gbps": (RANGES["bw_bytes_per_s"][0] / GB, RANGES["bw_bytes_per_s"][1] / GB, "GB/s"),
    "nic_gbps": (RANGES["bw_bytes_per_s"][0] / GB, RANGES["bw_bytes_per_s"][1] / GB, "GB/s"),
    "hbm_gib": (0.0, MAX_HBM_BYTES / GiB, "GiB"),
    "dma_engines": (1, MAX_DMA_ENGINES, "engines"),
}

_ALLOWED = {
    "int": "positive integers",
    "float": "positive numbers",
    "name": "preset names or spec files",
    "dtype": f"some of {', '.join(DTYPES)}",
    "framework": f"some of {', '.join(FRAMEWORKS)}",
    "grad_dtype": f"some of {', '.join(GRAD_DTYPES)}",
}


@dataclass(frozen=True, kw_only=True)
class Case:
    """One planning question of a sweep (what-ifs ``None`` = the cluster as specified)."""

    model: str
    cluster: str
    gpus: int
    global_batch: int
    seq: int
    dtype: str = "bf16"
    dma_engines: int | None = None
    nvlink_gbps: float | None = None
    nic_gbps: float | None = None
    hbm_gib: float | None = None
    framework: str = DEFAULT_FRAMEWORK
    grad_dtype: str = "fp32"
    time_limit_s: float = OPTIONS["time_limit_s"][1]
    #: what chooses the case's plan and what its run is priced on (planner.api.recommend's objective,
    #: train_tokens and objective_inputs as sorted items); part of the id only when given
    objective: str = "step"
    train_tokens: float | None = None
    objective_inputs: tuple = ()

    def inputs(self) -> dict:
        """The input columns of this case's result row."""
        return {k: getattr(self, k) for k in AXES_COLUMNS}

    @property
    def id(self) -> str:
        """16 hex digits of SHA-256 over the inputs and options (stable across runs and machines);
        the software inputs at their defaults are left out, so a case keeps the id it had before
        they were axes."""
        doc = {**self.inputs(), "time_limit_s": self.time_limit_s, **self._objective()}
        text = json.dumps(
            {k: v for k, v in doc.items() if v is not None and SOFTWARE_DEFAULTS.get(k) != v}, sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _objective(self) -> dict:
        """The objective's part of the id: nothing at the defaults (a case keeps the id it had before)."""
        if self.objective == "step" and self.train_tokens is None and not self.objective_inputs:
            return {}
        return {"objective": self.objective, "train_tokens": self.train_tokens, **dict(self.objective_inputs)}

    def problem(self) -> tuple[ModelSpec, ClusterSpec, Workload]:
        """The specs of this case, what-ifs applied (raises SpecError for a malformed case)."""
        model = resolve_model(self.model)
        cluster = apply_whatifs(
            resolve_cluster(self.cluster, self.gpus),
            dma_engines=self.dma_engines,
            nvlink_gbps=self.nvlink_gbps,
            nic_gbps=self.nic_gbps,
            hbm_gib=self.hbm_gib,
        )
        return model, cluster, make_workload(self.global_batch, self.seq, self.dtype)


#: input columns (schema order, the last two added in schema version 4)
AXES_COLUMNS = (
    "model",
    "cluster",
    "gpus",
    "global_batch",
    "seq",
    "dtype",
    "dma_engines",
    "nvlink_gbps",
    "nic_gbps",
    "hbm_gib",
    "framework",
    "grad_dtype",
)


def apply_whatifs(
    cluster: ClusterSpec,
    *,
    dma_engines: int | None = None,
    nvlink_gbps: float | None = None,
    nic_gbps: float | None = None,
    hbm_gib: float | None = None,
) -> ClusterSpec:
    """``cluster`` with hardware what-ifs applied (``None`` leaves a property as it is).

    >>> from costmodel.spec.presets import load_cluster
    >>> c = apply_whatifs(load_cluster("sg2262-like"), dma_engines=8, nic_gbps=200)
    >>> [e.count for e in c.device.dma_engines if e.scopes][0], c.inter_link.bw_bytes_per_s
    (8, 200000000000.0)
    """
    dev = cluster.device
    if hbm_gib is not None:
        dev = replace(dev, hbm_bytes=hbm_gib * GiB)
    if dma_engines is not None:
        dev = replace(dev, dma_engines=tuple(replace(e, count=dma_engines) if e.scopes else e for e in dev.dma_engines))
    out = replace(cluster, device=dev) if dev is not cluster.device else cluster
    if nvlink_gbps is not None:
        out = replace(out, intra_link=replace(out.intra_link, bw_bytes_per_s=nvlink_gbps * GB))
    if nic_gbps is not None:
        out = replace(out, inter_link=replace(out.inter_link, bw_bytes_per_s=nic_gbps * GB))
    return out


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The axes of a sweep (each a tuple of values) and the solver options."""

    models: tuple[str, ...]
    clusters: tuple[str, ...]
    gpus: tuple[int, ...]
    global_batch: tuple[int, ...]
    seq: tuple[int, ...]
    dtype: tuple[str, ...] = ("bf16",)
    dma_engines: tuple[int | None, ...] = (None,)
    nvlink_gbps: tuple[float | None, ...] = (None,)
    nic_gbps: tuple[float | None, ...] = (None,)
    hbm_gib: tuple[float | None, ...] = (None,)
    framework: tuple[str, ...] = (DEFAULT_FRAMEWORK,)
    grad_dtype: tuple[str, ...] = ("fp32",)
    time_limit_s: float = OPTIONS["time_limit_s"][1]
    objective: str = "step"  # the objective of every case (Case.objective; set from flags)
    train_tokens: float | None = None
    objective_inputs: tuple = ()
    run: dict = field(default_factory=dict, compare=False)  # out/workers/backend/address from a file

    def cases(self) -> list[Case]:
        """Every combination, models outermost; duplicates (same id) kept once."""
        out, seen = [], set()
        axes = [getattr(self, k) for k in AXES]
        for values in itertools.product(*axes):
            kw = dict(zip(AXES, values))
            case = Case(
                model=kw.pop("models"),
                cluster=kw.pop("clusters"),
                time_limit_s=self.time_limit_s,
                objective=self.objective,
                train_tokens=self.train_tokens,
                objective_inputs=self.objective_inputs,
                **kw,
            )
            if case.id not in seen:
                seen.add(case.id)
                out.append(case)
        return out

    def to_mapping(self) -> dict:
        """Plain values, readable back by :func:`grid_from_mapping`."""
        d = {k: [v for v in getattr(self, k)] for k in AXES}
        d = {k: v for k, v in d.items() if v != [None]}
        d["time_limit_s"] = self.time_limit_s
        return d


def _split(key: str, value) -> list:
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        if any(p == "" for p in parts):
            raise SpecError(key, value, f"{_ALLOWED[AXES[key][0]]} (a list, or comma-separated)")
        return parts
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _value(key: str, kind: str, v):
    out = _typed(key, kind, v)
    if key in WHATIF_RANGES:
        lo, hi, unit = WHATIF_RANGES[key]
        if not lo <= out <= hi:
            raise SpecError(key, v, f"a number in [{lo:g}, {hi:g}] {unit} (a sanity bound)")
    return out


def _typed(key: str, kind: str, v):
    bad = SpecError(key, v, f"{_ALLOWED[kind]} (a list, or comma-separated)")
    if kind == "int":
        if isinstance(v, bool):
            raise bad
        if isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                raise bad from None
        if not isinstance(v, int) or v < 1:
            raise bad
        return v
    if kind == "float":
        if isinstance(v, bool):
            raise bad
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise bad from None
        if not math.isfinite(f) or f <= 0:
            raise bad
        return f
    if not isinstance(v, str) or not v:
        raise bad
    if (
        (kind == "dtype" and v not in DTYPES)
        or (kind == "framework" and v not in FRAMEWORKS)
        or (kind == "grad_dtype" and v not in GRAD_DTYPES)
    ):
        raise bad
    return v


def grid_from_mapping(data: dict, source: str = "grid") -> Grid:
    """A :class:`Grid` from a dict of axis -> value(s) (flags or a parsed file).

    Raises :class:`SpecError` naming the key, the value and what is allowed; model and cluster
    names are resolved here, so a typo fails before any case runs.
    """
    if not isinstance(data, dict):
        raise SpecError(source, data, "a mapping of grid keys to values")
    norm = {}
    for k, v in data.items():
        key = ALIASES.get(str(k).replace("-", "_"), str(k).replace("-", "_"))
        if key not in AXES and key not in OPTIONS and key not in RUN_KEYS:
            allowed = ", ".join(list(AXES) + list(OPTIONS) + list(RUN_KEYS))
            raise SpecError(f"{source}.{k}" if source != "grid" else str(k), v, f"a grid key ({allowed})")
        if v is not None:
            norm[key] = v
    kw: dict = {}
    for key, (kind, required) in AXES.items():
        if key not in norm:
            if required:
                raise SpecError(key, None, f"given ({_ALLOWED[kind]})")
            continue
        values = [_value(key, kind, v) for v in _split(key, norm[key])]
        if not values:
            raise SpecError(key, norm[key], f"at least one value ({_ALLOWED[kind]})")
        kw[key] = tuple(dict.fromkeys(values))  # keep order, drop repeats
    if "time_limit_s" in norm:
        v = norm["time_limit_s"]
        try:
            kw["time_limit_s"] = _value("time_limit_s", "float", v)
        except SpecError:
            raise SpecError("time_limit_s", v, "one positive number of seconds") from None
    for name in kw["models"]:
        resolve_model(name)
    for name in kw["clusters"]:
        resolve_cluster(name)
    run = {k: norm[k] for k in RUN_KEYS if k in norm}
    return Grid(**kw, run=run)


def load_grid_file(path: str | Path) -> dict:
    """The mapping in a YAML or JSON grid file (SpecError naming the file when unreadable)."""
    # a regular text file of at most MAX_SPEC_FILE_BYTES, refused before it is read (/dev/zero, a FIFO)
    text = read_text_file(Path(path), "grid", MAX_SPEC_FILE_BYTES, what="text YAML/JSON")
    try:
        import yaml

        data = yaml.safe_load(text)  # JSON is YAML
    except Exception as e:  # yaml.YAMLError
        raise SpecError("grid", str(path), f"valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SpecError("grid", str(path), "a YAML mapping of grid keys (models, gpus, ...) to values")
    return data
