"""``planner presets``: list the built-in model and cluster presets with their descriptions."""

from __future__ import annotations

import argparse

from costmodel.spec.presets import load_cluster, load_model, preset_info, preset_names

from costmodel.spec.errors import SpecError
from costmodel.spec.units import TFLOPS, GiB

from ..args import add_output_args
from ..report import print_json, table

#: description column width in the text listing (--json gives the full text)
DESCRIPTION_CHARS = 72


def _short(text: str) -> str:
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 3].rstrip() + "..."


NAME = "presets"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME, help="list model and cluster presets", description=__doc__.split(": ", 1)[1].strip()
    )
    p.add_argument(
        "name",
        nargs="?",
        help="one model or cluster preset: print its description, sources and assumptions (every number it "
        "carries that is not in its sources)",
    )
    add_output_args(p)
    return p


def detail(name: str) -> dict:
    """One preset's description, sources and named assumptions (``SpecError`` for an unknown name)."""
    kind = "clusters" if name in preset_names("clusters") else "models"
    if name not in preset_names(kind):
        raise SpecError("preset", name, "a model or cluster preset name (planner presets lists them)")
    info = preset_info(kind, name)
    return {
        "name": name,
        "kind": kind[:-1],
        "description": info.get("description", ""),
        "sources": list(info.get("sources", [])),
        "assumptions": list(info.get("assumptions", [])),
    }


def models() -> list[dict]:
    """One row per model preset: size, shape and description."""
    out = []
    for name in preset_names("models"):
        m = load_model(name)
        out.append(
            {
                "name": name,
                "params_b": round(m.params / 1e9, 2),
                "active_params_b": round(m.active_params / 1e9, 2),
                "layers": m.layers,
                "hidden": m.hidden,
                "heads": m.heads,
                "experts": m.experts,
                "description": preset_info("models", name).get("description", ""),
            }
        )
    return out


def clusters() -> list[dict]:
    """One row per cluster preset: device, peak, HBM and description."""
    out = []
    for name in preset_names("clusters"):
        c = load_cluster(name)
        out.append(
            {
                "name": name,
                "device": c.device.name,
                "gpus_per_node": c.gpus_per_node,
                "nvlink_domain": c.domain,
                "peak_bf16_tflops": round(c.device.peak_bf16_flops_per_s / TFLOPS, 1),
                "hbm_gib": round(c.device.hbm_bytes / GiB, 1),
                "description": preset_info("clusters", name).get("description", ""),
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    if getattr(args, "name", None):
        d = detail(args.name)
        if args.json:
            print_json(d)
            return 0
        print(f"{d['name']} ({d['kind']}): {d['description']}")
        for head in ("sources", "assumptions"):
            print(f"\n{head}:")
            print("\n".join(f"- {x}" for x in d[head]) or "- (none listed)")
        return 0
    ms, cs = models(), clusters()
    if args.json:
        print_json({"models": ms, "clusters": cs})
        return 0
    print("models (--model NAME)")
    print(
        table(
            ["name", "params B", "active B", "layers", "hidden", "heads", "experts", "description"],
            [
                [
                    m["name"],
                    m["params_b"],
                    m["active_params_b"],
                    m["layers"],
                    m["hidden"],
                    m["heads"],
                    m["experts"],
                    _short(m["description"]),
                ]
                for m in ms
            ],
        )
    )
    print()
    print("clusters (--cluster NAME)")
    print(
        table(
            ["name", "device", "GPUs/node", "NVLink domain", "BF16 TFLOP/s", "HBM GiB", "description"],
            [
                [
                    c["name"],
                    c["device"],
                    c["gpus_per_node"],
                    c["nvlink_domain"],
                    c["peak_bf16_tflops"],
                    c["hbm_gib"],
                    _short(c["description"]),
                ]
                for c in cs
            ],
        )
    )
    return 0
