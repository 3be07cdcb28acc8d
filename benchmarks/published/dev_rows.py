"""The development set's rows (``published_dev.csv``): the rules of the package docstring, "Development set"."""

from __future__ import annotations

from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

from benchmarks.regimes import regimes_of

from .cells import cell_num
from .measured import measured_step_s
from .row import Row
from .sources import FP16_GRADS, MEGATRON_ERA, MODEL_PRESET, NEMO_BF16_OPTIMIZER, nemo_bf16_grads


def dev_row(r: dict) -> Row:
    src = r["source_key"]
    model = load_model(MODEL_PRESET[r["model"]])
    gpus = int(float(r["num_gpus"]))
    gpu = r["gpu_type"]
    cluster = load_cluster(
        "h100-sxm" if "H100" in gpu else ("a100-40g" if src == "megatron_readme_2020" else "a100-80g")
    ).with_gpus(gpus)
    seq = int(float(r["seq_len"])) if cell_num(r["seq_len"]) else 1024
    tp, pp = int(float(r["tp"])), int(float(r["pp"]))
    cp = int(float(r["cp"])) if cell_num(r["cp"]) else 1
    dp = gpus // (tp * pp * cp)
    batch = int(r["global_batch"]) if cell_num(r["global_batch"]) else None
    dtype = "fp8" if r["precision"] == "FP8" else "bf16"
    era = src in MEGATRON_ERA
    rec = r["recompute"]
    fixed = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        sp=(r["sp"] == "yes") if r["sp"] in ("yes", "no") else (not era and tp > 1),
        recompute="full"
        if rec.startswith("full") or src == "megatron_readme_2020"
        else ("selective" if rec.startswith("selective") else "none"),
        zero=0 if era else 1,
        flash_attention=not era,
        bucket_bytes=0 if era else 160e6,
        chunks=tp if (not era and tp > 1) else 1,
        grad_dtype="fp16" if src in FP16_GRADS else ("bf16" if nemo_bf16_grads(src, r["model"]) else "fp32"),
    )
    free = {}
    if cell_num(r["micro_batch"]):
        fixed["mb"] = int(float(r["micro_batch"]))
    else:
        free["mb"] = [1, 2, 4, 8]
    vp = r["vp"].split(" ")[0]
    if cell_num(vp):
        fixed["vp"] = int(float(vp))
    elif pp > 1 and ("interleaved" in r["vp"] or "not stated" in r["vp"]):
        per = model.layers // pp
        free["vp"] = [v for v in range(1, per + 1) if per % v == 0]
    else:
        fixed["vp"] = 1
    skip = "" if batch else "global batch not stated"
    wl = Workload(global_batch=batch or 1, seq_len=seq, dtype=dtype)
    measured, how = measured_step_s(r, model, seq, gpus, batch or 1) if batch else (None, "")
    if measured is None and not skip:
        skip = "no step time, throughput or TFLOP/s stated"
    notes = [f"{k} chosen by the planner from {v}" for k, v in free.items()]
    if src in FP16_GRADS:
        notes.append("FP16 gradients reduced (Megatron-LM of the era, FP16 without FP32 all-reduce: FP16_GRADS)")
    if nemo_bf16_grads(src, r["model"]):
        notes.append("BF16 gradient buffer: grad_sync_dtype=bf16 in the NeMo launcher's H100 recipe (NEMO_BF16_GRADS)")
    if any(r["model"].startswith(p) for p in NEMO_BF16_OPTIMIZER.get(src, ())) and fixed["zero"] == 1:
        fixed["optimizer_dtype"] = "bf16"
        notes.append(
            "optimizer_dtype bf16: distributed_fused_adam with optim.dtype bf16 in the NeMo launcher's "
            "recipe, no master copy (NEMO_BF16_OPTIMIZER)"
        )
    row = Row(
        r["row_id"],
        src,
        r["model"],
        model,
        cluster,
        wl,
        fixed,
        free,
        measured,
        skip,
        set="dev",
        gpus=gpus,
        notes=notes,
        measured_how=how,
    )
    vp_reg = fixed.get("vp", 1)
    row.regimes = regimes_of(
        dict(
            gpu=cluster.device.name,
            dtype=dtype,
            experts=model.experts,
            topk=model.topk,
            ep=1,
            gpus=gpus,
            cp=cp,
            seq=seq,
            layers=model.layers,
            pp=pp,
            vp=vp_reg,
            sharding="megatron",
            zero=fixed["zero"],
        )
    )
    return row
