"""The README's figures, rendered from ``benchmarks/results/*.json`` between markers.

A figure block in README.md is::

    <!-- results:NAME -->
    (text written by ``python -m benchmarks.render``)
    <!-- /results:NAME -->

NAME is a key of :data:`BLOCKS`; each block is rendered from the named results only, ends with the
command, commit and date it comes from, and carries the results' stale marks.
"""

from __future__ import annotations

import re

RESULTS_LINK = "[`benchmarks/RESULTS.md`](benchmarks/RESULTS.md)"
MARKER = re.compile(r"^([ \t]*)<!-- results:([\w-]+) -->\n(.*?)^[ \t]*<!-- /results:\2 -->$", re.M | re.S)
SETS = {  # what each published set is (labels, not figures)
    "dev": "development set (`published_dev.csv`: Megatron-LM SC21, Korthikanti et al. 2023, 2020 Megatron-LM "
    "README, NeMo 24.07 H100 FP8)",
    "new": "new set, unsealed (`published_new.csv`: Megatron-LM 2024 H100 weak scaling, Llama 3 Table 4, "
    "MegaScale, NeMo AutoModel, Qwen3 MoE model zoo, DeepSeek-V3)",
    "all": "both",
}
REGIME_LABELS = {
    "h100_bf16_dense": "H100 BF16 dense",
    "h100_fp8": "H100 FP8",
    "zero3_fsdp": "ZeRO-3/FSDP",
    "moe_ep": "MoE with EP",
    "moe_fine": "fine-grained MoE",
    "gpus_4k": ">= 4,000 GPUs",
    "long_cp": "long-context CP",
    "uneven_pp": "uneven stages",
    "a100_megatron": "A100 Megatron",
    "other": "other (B200)",
}


class MissingResult(KeyError):
    """A block names a result that is not recorded."""


def _p(v, signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+.1f}%" if signed else f"{v:.1f}%")


def _source(docs: dict, *names: str) -> list[str]:
    """The closing line of a block: where its figures come from."""
    parts = [f"`{docs[n]['command']}` at `{docs[n]['commit']}`, {docs[n]['date'][:10]}" for n in names]
    return ["", "(" + "; ".join(parts) + f"; the full figures: {RESULTS_LINK}.)"]


def _need(docs: dict, *names: str) -> list[dict]:
    missing = [n for n in names if n not in docs]
    if missing:
        raise MissingResult(f"no result for {', '.join(f'`{n}`' for n in missing)} in `benchmarks/results`")
    return [docs[n] for n in names]


def accuracy(docs: dict) -> list[str]:
    (d,) = _need(docs, "validate_published")
    sets = {r["group"][4:]: r for r in d["table"] if r["group"].startswith("set ")}
    out = ["| set | rows | mean abs. error | signed mean | max abs. error |", "|---|---|---|---|---|"]
    for s in ("dev", "new", "all"):
        r = sets[s]
        out.append(
            f"| {SETS[s]} | {r['rows']} | {_p(r['mean |err| %'])} | {_p(r['signed %'], True)} | "
            f"{_p(r['max |err| %'])} |"
        )
    regimes = [r for r in d["table"] if r["group"] in REGIME_LABELS and r["rows"]]
    out += [
        "",
        "Per regime (mean abs. / signed, both sets): "
        + ", ".join(f"{REGIME_LABELS[r['group']]} {_p(r['mean |err| %'])} / {_p(r['signed %'], True)}" for r in regimes)
        + ".",
    ]
    names = ["validate_published"]
    if "validate_published_analytic" in docs:
        a = docs["validate_published_analytic"]["headline"]
        out[-1] += f" The analytic engine: {_p(a['all mean |err| %'])} / {_p(a['all signed %'], True)} on both sets."
        names.append("validate_published_analytic")
    return out + _source(docs, *names)


def serving(docs: dict) -> list[str]:
    (d,) = _need(docs, "validate_inference")
    h = d["headline"]
    return [
        f"Serving predictions (`benchmarks/validate_inference.py`, {h['rows']} published TensorRT-LLM, NIM, vLLM "
        f"and SGLang rows, nothing fitted) are within {_p(h['mean |err| %'])} on average (max "
        f'{_p(h["max |err| %"])}), queued NIM rows included (see "Serving" below).'
    ] + _source(docs, "validate_inference")


def components(docs: dict) -> list[str]:
    names = ("component_collectives", "component_kernels", "component_memory", "component_mechanics", "component_ep")
    col, ker, mem, mech, ep = (x["headline"] for x in _need(docs, *names))
    return [
        "Each physical part has its own benchmark against its own measurements, so a constant fitted to step "
        f"times can be compared with what its component says: collectives {col['text/label cases']} cases "
        f"{_p(col['text/label mean |err| %'])} mean |err| ({col['cases >= 1,000 GPUs']} at >= 1,000 GPUs: "
        f"{_p(col['>= 1,000 GPUs mean |err| %'])}); kernels {ker['rows']} rows {_p(ker['mean |err| %'])} (the "
        f"kernel model); memory {mem['tensor cases']} tensor peaks {_p(mem['tensors mean |err| %'])} and "
        f"{mem['reserved cases']} reserved peaks {_p(mem['reserved mean |err| %'])}; framework mechanics "
        f"{mech['matching']} of {mech['compared']} quantities match; EP dispatch {ep['text cases']} DeepEP cases "
        f"{_p(ep['deepep mean |err| %'])}."
    ] + _source(docs, *names)


def bands(docs: dict) -> list[str]:
    (d,) = _need(docs, "band_coverage")
    h = d["headline"]
    return [
        f"With each source's bands built only from the other sources' residuals, {h['all inside']} of the "
        f"{h['all rows']} published runs outside the sealed split ({h['all inside %']:.0f}%) fall inside their "
        f"80% band at a median width (hi - lo over the estimate) of {_p(h['all median width %'])}: "
        f"{h['dev inside %']:.0f}% at {_p(h['dev median width %'])} on the development set, "
        f"{h['new inside %']:.0f}% at {_p(h['new median width %'])} on the new set (targets: >= 80% inside, "
        "median width <= 30%)."
    ] + _source(docs, "band_coverage")


def layouts(docs: dict) -> list[str]:
    (d,) = _need(docs, "layout_equality")
    h = d["headline"]
    return [
        f"CP-SAT's layout equals an exhaustive layout search on {h['equal']} of {h['instances']} random small "
        f"instances (`benchmarks/layout_equality.py`), and on {h['beaten']} of the {h['checked']} small "
        "enough to enumerate every per-rank layout, a layout outside the space (any counts where `vp` divides "
        "the layers, unequal middle ranks) is faster."
    ] + _source(docs, "layout_equality")


def suite(docs: dict) -> list[str]:
    (d,) = _need(docs, "suite_time")
    h = d["headline"]
    load = d["host"]["load_avg"][1]
    return [
        f"The second command's test suite: {h['passed']:,} tests passed ({h['failed']} failed, {h['skipped']} "
        f"skipped) in {h['wall min']:.0f} minutes wall, {h['cpu min']:.0f} minutes CPU, on {d['host']['cores']} "
        f"cores at a load of {load:.1f}."
    ] + _source(docs, "suite_time")


#: block name -> (renderer, the results it reads)
BLOCKS = {
    "accuracy": (accuracy, ("validate_published", "validate_published_analytic")),
    "serving": (serving, ("validate_inference",)),
    "components": (
        components,
        ("component_collectives", "component_kernels", "component_memory", "component_mechanics", "component_ep"),
    ),
    "bands": (bands, ("band_coverage",)),
    "layouts": (layouts, ("layout_equality",)),
    "suite": (suite, ("suite_time",)),
}


def fill(text: str, docs: dict, freshness) -> str:
    """``text`` with every marked block rewritten from ``docs``; ``freshness(doc)`` gives a result's
    stale marks. An unknown block name raises KeyError; a block whose result is not recorded says so."""

    def one(m: re.Match) -> str:
        indent, name = m.group(1), m.group(2)
        render, used = BLOCKS[name]
        try:
            lines = render(docs)
        except MissingResult as e:
            lines = [f"(Not recorded yet: {e.args[0]}; run the benchmark, then `python -m benchmarks.render`.)"]
        marks = dict.fromkeys(m for n in used if n in docs for m in freshness(docs[n]))  # once each
        lines += [x for mark in marks for x in ("", mark)]
        body = "\n".join((indent + x) if x else "" for x in lines)
        return f"{indent}<!-- results:{name} -->\n{body}\n{indent}<!-- /results:{name} -->"

    return MARKER.sub(one, text)


def names_in(text: str) -> list[str]:
    """The block names marked in ``text``, in order."""
    return [m.group(2) for m in MARKER.finditer(text)]
