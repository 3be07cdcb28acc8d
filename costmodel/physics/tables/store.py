"""The committed tables: the manifest, the data files, which system a device is and which table a
look-up reads (the stack's backend and version, or the nearest that exists, said in a note)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

DATA = Path(__file__).resolve().parent / "data"

#: DeviceSpec.name (cluster presets, costmodel/spec/presets/clusters/*.json) -> AIConfigurator system.
#: A100-SXM4-40GB, the 96 GB HBM2e H100 and H800 have no table of their own: none here (look-ups say so).
DEVICE_SYSTEM = {
    "A100-SXM4-80GB": "a100_sxm",
    "H100-SXM5-80GB": "h100_sxm",
    "H200-SXM5-141GB": "h200_sxm",
    "B200": "b200_sxm",
    "B300": "b300_sxm",
    "GB200": "gb200",
    "GB300": "gb300",
}
#: default backend order when a look-up names none: TensorRT-LLM's tables are the most complete
BACKENDS = ("trtllm", "vllm", "sglang")


class TableChoice(NamedTuple):
    """The table a look-up reads and, when it is not the one asked for, why (``note``)."""

    file: str
    system: str
    op: str
    backend: str
    version: str
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.system}/{self.op}/{self.backend}/{self.version}"


def version_key(v: str) -> tuple:
    """Order versions numerically; a pre-release (rc, dev) sorts before its release."""
    parts = []
    for tok in re.findall(r"\d+|[a-z]+", str(v).lower()):
        parts.append((1, int(tok)) if tok.isdigit() else (0, tok) if tok in ("rc", "a", "b", "dev") else (2, tok))
    return (*parts, (1, 0))


@lru_cache(maxsize=1)
def manifest() -> dict:
    return json.loads((DATA / "manifest.json").read_text())


@lru_cache(maxsize=64)
def load(file: str) -> dict[str, np.ndarray]:
    """The arrays of one data file (read once)."""
    with np.load(DATA / file, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def systems() -> set[str]:
    return {e["system"] for e in manifest()["files"].values()}


def system_of(device) -> str | None:
    """The AIConfigurator system of ``device`` (a DeviceSpec, its name, or a system name), or None
    when no table was measured on it."""
    name = getattr(device, "name", device)
    if not isinstance(name, str):
        return None
    if name in DEVICE_SYSTEM:
        return DEVICE_SYSTEM[name]
    return name if name in systems() else None


def _files(system: str, op: str) -> dict[str, dict]:
    return {f: e for f, e in manifest()["files"].items() if e["system"] == system and e["op"] == op}


def _alias(system: str, op: str, backend: str, version: str) -> str | None:
    for a in manifest()["aliases"]:
        if (a["system"], a["op"], a["backend"], a["version"]) == (system, op, backend, version) and not a.get(
            "collected_too"
        ):
            return a["reuses"]
    return None


def parse_backend(backend: str | None) -> tuple[str | None, str | None]:
    """``"trtllm"``, ``"trtllm 1.3.0rc20"``, ``"trtllm/1.3.0rc20"`` or ``"trtllm==1.3.0rc20"`` -> (name, version)."""
    if not backend:
        return None, None
    parts = [p for p in re.split(r"[\s/=@]+", backend.strip().lower()) if p]
    name = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm"}.get(parts[0], parts[0])
    return name, (parts[1] if len(parts) > 1 else None)


def _nearest(versions: list[str], want: str) -> str:
    """The newest of ``versions`` not newer than ``want``, else the oldest."""
    below = [v for v in versions if version_key(v) <= version_key(want)]
    return max(below, key=version_key) if below else min(versions, key=version_key)


def table_for(device, op: str = "gemm", backend: str | None = None, dtype: str | None = None) -> TableChoice | None:
    """The table a look-up of ``op`` (``gemm`` or ``nccl``) on ``device`` reads, or None without one.

    ``backend`` names the stack's library: for GEMM ``"<trtllm|vllm|sglang> [version]"``, for NCCL its
    version (``"2.27.3"``). Where that table does not exist the nearest stands in (the same backend's
    nearest version, else another backend in the order trtllm, vllm, sglang) and ``note`` says which.
    ``dtype`` (a table dtype such as ``bfloat16``) skips GEMM tables that lack it."""
    system = system_of(device)
    if system is None:
        return None
    files = _files(system, op)
    if dtype is not None:
        files = {f: e for f, e in files.items() if dtype in e.get("dtypes", {})}
    if not files:
        return None
    if op == "nccl":
        by_version = {e["backend_version"]: f for f, e in files.items()}
        versions = sorted(by_version, key=version_key)
        want = backend.strip() if backend else None
        if want is None or want in by_version:
            v = want or versions[-1]
            return TableChoice(by_version[v], system, "nccl", "nccl", v)
        v = _nearest(versions, want)
        return TableChoice(by_version[v], system, "nccl", "nccl", v, f"no NCCL {want} table: {v} stands in")
    name, version = parse_backend(backend)
    kept = {(e["backend"], e["backend_version"]): f for f, e in files.items()}
    order = ([name] if name else []) + [b for b in BACKENDS if b != name]
    for b in order:
        versions = sorted((v for bb, v in kept if bb == b), key=version_key)
        if not versions:
            continue
        if b != name:
            what = f"{name} {dtype}" if dtype else name
            note = f"no {what} table on {system}: {b} {versions[-1]} stands in" if name else ""
            return TableChoice(kept[(b, versions[-1])], system, op, b, versions[-1], note)
        if version is None or version in versions:
            v = version or versions[-1]
            return TableChoice(kept[(b, v)], system, op, b, v)
        donor = _alias(system, op, b, version)
        if donor in versions:
            return TableChoice(kept[(b, donor)], system, op, b, donor, f"{b} {version} reuses {donor} (reuse.yaml)")
        v = _nearest(versions, version)
        return TableChoice(kept[(b, v)], system, op, b, v, f"no {b} {version} table kept: {v} stands in")
    return None
