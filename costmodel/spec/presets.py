"""Load specs from built-in presets, JSON/YAML files, or a Hugging Face ``config.json``.

Preset files live in ``costmodel/spec/presets/{models,clusters}/<name>.json`` and use human units
(TFLOP/s, GB/s, GiB, microseconds), converted here, once, to SI.

>>> load_model("gpt3-175b").layers
96
>>> load_cluster("a100-80g").device.peak_bf16_flops_per_s
312000000000000.0
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from functools import lru_cache
from pathlib import Path

from costmodel.spec.bounds import MAX_SPEC_FILE_BYTES, read_text_file
from costmodel.spec.errors import SpecError
from costmodel.spec.specs import ClusterSpec, DeviceSpec, DmaEngineClass, LinkSpec, ModelSpec
from costmodel.spec.units import GB, GiB, TFLOPS, US

PRESET_DIR = Path(__file__).parent / "presets"
#: keys a preset or spec file may carry for people, ignored by the loader
_DOC_KEYS = {"source", "sources", "notes", "description", "assumptions", "dropout_source", "$schema"}


@lru_cache(maxsize=2)
def _names(kind: str) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in (PRESET_DIR / kind).glob("*.json")))


def preset_names(kind: str) -> list[str]:
    """Sorted preset names of ``kind`` ('models' or 'clusters')."""
    return list(_names(kind))


def preset_info(kind: str, name: str) -> dict:
    """The raw preset document (with its description, sources and assumptions)."""
    return json.loads((PRESET_DIR / kind / f"{name}.json").read_text())


def _read_file(path: Path, field: str) -> dict:
    # a regular file of at most MAX_SPEC_FILE_BYTES, before a byte is parsed (/dev/zero, a FIFO, a checkpoint)
    text = read_text_file(path, field, MAX_SPEC_FILE_BYTES, what="text JSON/YAML")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError
        msg = str(e).splitlines()[0]
        raise SpecError(field, str(path), f"valid JSON or YAML ({msg})") from None
    if not isinstance(data, dict):
        raise SpecError(field, str(path), "a file holding one JSON/YAML object")
    return data


def _resolve(kind: str, name_or_path: str, field: str) -> dict:
    if not isinstance(name_or_path, str) or not name_or_path:
        raise SpecError(field, name_or_path, "a preset name or a file path")
    preset = PRESET_DIR / kind / f"{name_or_path}.json"
    path = Path(name_or_path)
    try:
        if preset.is_file():
            return json.loads(preset.read_text())
        is_file = path.suffix in (".json", ".yaml", ".yml") or path.exists()
    except OSError as e:  # a name too long for the file system, a bad path component
        raise SpecError(
            field,
            name_or_path,
            f"{_presets_hint(kind, name_or_path)} or a readable JSON/YAML file ({e.strerror})",
        ) from None
    if is_file:
        return _read_file(path, field)
    raise SpecError(field, name_or_path, f"{_presets_hint(kind, name_or_path)} or a JSON/YAML file")


def _presets_hint(kind: str, name: str) -> str:
    """``a preset (did you mean llama3-8b? planner presets lists all 55)``: the closest names, not the whole
    list, so that the refusal stays one short line."""
    import difflib

    names = preset_names(kind)
    close = difflib.get_close_matches(name[:100].lower(), names, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(close)}? " if close else ""
    return f"a preset ({guess}`planner presets` lists all {len(names)})"


def known_keys_hint(key, known: list[str]) -> str:
    """The keys an unknown ``key`` may have meant: the closest, else all of them while they fit a short line
    (the model's 45 keys made a 676-character refusal, cut mid-list)."""
    import difflib

    close = difflib.get_close_matches(str(key)[:100], known, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(close)}?"
    listing = ", ".join(known)
    return listing if len(listing) <= 160 else f"{len(known)} keys: {listing[:120].rsplit(', ', 1)[0]}, ..."


def _build(cls, data: dict, field: str, human: dict | None = None, raw: dict | None = None):
    """Construct a spec dataclass from a dict, naming any unknown, missing or bad key as the
    user wrote it (``human`` maps SI field names back to the file's keys)."""
    allowed = {f.name for f in fields(cls)}
    names = {si: k for k, (si, _) in (human or {}).items()}
    kw = {}
    for k, v in data.items():
        if k in _DOC_KEYS:
            continue
        if k not in allowed:
            raise SpecError(
                f"{field}.{k}", v, f"a known key ({known_keys_hint(k, sorted(names.get(a, a) for a in allowed))})"
            )
        kw[k] = v
    try:
        return cls(**kw)
    except TypeError as e:
        msg = str(e)
        if "required" in msg and "'" in msg:
            missing = msg.split("'")[1]
            raise SpecError(f"{field}.{names.get(missing, missing)}", None, "present (a required key)") from None
        raise SpecError(field, None, f"well-typed ({msg})") from None
    except SpecError as e:
        if e.field.startswith(field + "."):
            raise
        # an SI name, alone or last (``dma.nccl-sm.bw_bytes_per_s``), as the file's key, with the value it wrote
        head, dot, last = e.field.rpartition(".")
        human = names.get(last, last)
        value = (raw if raw is not None else data).get(human, e.value)
        raise SpecError(f"{field}.{head}{dot}{human}", value, e.allowed) from None


def model_from_dict(data: dict) -> ModelSpec:
    """A :class:`ModelSpec` from our own keys, or from a Hugging Face ``config.json`` dict."""
    if "model_type" in data or "architectures" in data:
        from costmodel.spec.hf_config import model_from_hf_config

        return model_from_hf_config(data)
    return _build(ModelSpec, data, "model")


# human unit of each scaled key -> (SI field name, factor)
_DEVICE_UNITS = {
    "peak_bf16_tflops": ("peak_bf16_flops_per_s", TFLOPS),
    "peak_fp8_tflops": ("peak_fp8_flops_per_s", TFLOPS),
    "hbm_gib": ("hbm_bytes", GiB),
    "hbm_bw_gbps": ("hbm_bw_bytes_per_s", GB),
    "kernel_overhead_us": ("kernel_overhead_s", US),
}
_LINK_UNITS = {
    "bw_gbps": ("bw_bytes_per_s", GB),
    "latency_us": ("latency_s", US),
    "nvls_tree_channel_bw_gbps": ("nvls_tree_channel_bw_bytes_per_s", GB),
    "nvls_tree_2node_channel_bw_gbps": ("nvls_tree_2node_channel_bw_bytes_per_s", GB),
}
_ENGINE_UNITS = {"bw_gbps": ("bw_bytes_per_s", GB)}


def _scale(data: dict, units: dict, field: str) -> dict:
    if not isinstance(data, dict):
        raise SpecError(field, data, "an object")
    out = {}
    for k, v in data.items():
        if k in units:
            name, factor = units[k]
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise SpecError(f"{field}.{k}", v, "a number")
            if v in (math.inf, -math.inf):  # Infinity / .inf: no device or link is infinitely fast
                raise SpecError(f"{field}.{k}", v, "a finite number")
            out[name] = v * factor
        else:
            out[k] = v
    return out


def cluster_from_dict(data: dict) -> ClusterSpec:
    """A :class:`ClusterSpec` from a preset-style dict in human units (GB/s, TFLOP/s, GiB, us).

    A ``calibrated`` section (written by ``planner calibrate``) records how the constants were
    fitted; its ``fitted`` names and ``loo_log_residuals`` are kept on the spec.
    """
    d = {k: v for k, v in data.items() if k not in _DOC_KEYS}
    if "calibrated" in d:
        cal = d.pop("calibrated")
        if not isinstance(cal, dict):
            raise SpecError("cluster.calibrated", cal, "an object (as written by planner calibrate)")
        fitted, resid = cal.get("fitted") or [], cal.get("loo_log_residuals") or []
        if not isinstance(fitted, list) or not all(isinstance(x, str) for x in fitted):
            raise SpecError("cluster.calibrated.fitted", fitted, "a list of constant names")
        if not isinstance(resid, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in resid
        ):
            raise SpecError("cluster.calibrated.loo_log_residuals", resid, "a list of finite numbers")
        d["calibrated_constants"], d["calibration_log_residuals"] = tuple(fitted), tuple(resid)
    for key in ("device", "intra_link", "inter_link"):
        if key not in d:
            raise SpecError(f"cluster.{key}", None, "present")
    dev = _scale(d["device"], _DEVICE_UNITS, "device")
    engines = dev.get("dma_engines", [])
    if not isinstance(engines, list):
        raise SpecError("device.dma_engines", engines, "a list of engine classes")
    dev["dma_engines"] = tuple(
        _build(DmaEngineClass, _scale(e, _ENGINE_UNITS, "dma_engine"), "dma_engine", _ENGINE_UNITS, e) for e in engines
    )
    d["device"] = _build(DeviceSpec, dev, "device", _DEVICE_UNITS, d["device"])
    for link in ("intra_link", "inter_link"):
        d[link] = _build(LinkSpec, _scale(d[link], _LINK_UNITS, link), link, _LINK_UNITS, d[link])
    return _build(ClusterSpec, d, "cluster")


def cluster_to_dict(c: ClusterSpec) -> dict:
    """Inverse of :func:`cluster_from_dict` (human units), for writing spec files."""

    def unscale(obj, units):
        inv = {si: (human, f) for human, (si, f) in units.items()}
        out = {}
        for f in fields(obj):
            v = getattr(obj, f.name)
            if f.name in inv:
                out[inv[f.name][0]] = v / inv[f.name][1]
            elif isinstance(v, tuple):
                out[f.name] = [unscale(e, _ENGINE_UNITS) if hasattr(e, "__dataclass_fields__") else e for e in v]
            else:
                out[f.name] = v
        return out

    d = {
        "name": c.name,
        "gpus_per_node": c.gpus_per_node,
        **({"nvlink_domain": c.nvlink_domain} if c.nvlink_domain else {}),
        "num_gpus": c.num_gpus,
        "device": unscale(c.device, _DEVICE_UNITS),
        "intra_link": unscale(c.intra_link, _LINK_UNITS),
        "inter_link": unscale(c.inter_link, _LINK_UNITS),
    }
    if c.stack != ClusterSpec.__dataclass_fields__["stack"].default:
        d["stack"] = c.stack
    return d


def model_to_dict(m: ModelSpec) -> dict:
    return {f.name: getattr(m, f.name) for f in fields(m)}


def load_model(name_or_path: str) -> ModelSpec:
    """A model by preset name, JSON/YAML file, or Hugging Face ``config.json``."""
    if isinstance(name_or_path, str) and name_or_path in _names("models"):
        return _preset_model(name_or_path)
    spec = model_from_dict(_resolve("models", name_or_path, "model"))
    if spec.name == "model":
        from dataclasses import replace

        spec = replace(spec, name=Path(name_or_path).stem)
    return spec


def load_cluster(name_or_path: str) -> ClusterSpec:
    """A cluster by preset name or JSON/YAML file (human units)."""
    if isinstance(name_or_path, str) and name_or_path in _names("clusters"):
        return _preset_cluster(name_or_path)
    return cluster_from_dict(_resolve("clusters", name_or_path, "cluster"))


@lru_cache(maxsize=64)
def _preset_cluster(name: str) -> ClusterSpec:
    return cluster_from_dict(_resolve("clusters", name, "cluster"))


@lru_cache(maxsize=256)
def _preset_model(name: str) -> ModelSpec:
    return model_from_dict(_resolve("models", name, "model"))
