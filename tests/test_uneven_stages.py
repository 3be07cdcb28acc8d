"""Uneven pipeline stages: published plans whose layers do not divide ``pp * vp`` evaluate on
both engines, and ``--emit megatron`` prints flags that Megatron-Core accepts and that place
exactly the evaluated layers on every (pipeline rank, virtual stage).

The Megatron-Core rules are re-implemented here from its source (nothing is imported from it):
``megatron/training/arguments.py`` (at most one of the three interleave flags; a layout gives the
interleave), ``megatron/core/transformer/transformer_config.py`` (``__post_init__``: first/last
and account-for rules, their conflicts), ``transformer_block.get_num_layers_to_build`` (layers
per virtual stage, one fewer where the embedding/loss is accounted for) and
``pipeline_parallel_layer_layout.py`` (``parse_str_to_list``, ``validate_layer_layout``).
"""

import re
import shlex

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.physics.validity import validate_config
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.spec.stages import chunk_layers, megatron_split
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import cli
from planner.emit import megatron_args
from planner.emit.megatron import megatron_text, split_form


# --------------------------------------------------------------------------- a Megatron-rule validator
class MegatronRefused(Exception):
    """Megatron-LM would stop with an assertion or ValueError."""


def _need(cond, why):
    if not cond:
        raise MegatronRefused(why)


def parse_layout(text: str) -> list[list[str]]:
    """``PipelineParallelLayerLayout.parse_str_to_list``: commas dropped, ``(..)*n`` then ``x*n``
    unrolled, stages split on ``|``; characters E, L, t, m."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    out = []
    for stage in text.split("|"):
        _need(all(ch in "ELtm" for ch in stage), f"invalid layer character in {stage!r}")
        out.append(list(stage))
    return out


def megatron_layers(argv: list[str], num_layers: int) -> list[list[int]]:
    """Transformer layers built on each ``[pp_rank][vp_stage]`` by Megatron-Core for ``argv``
    (``--flag value`` tokens), or :class:`MegatronRefused`."""
    a, i = {}, 0
    while i < len(argv):
        name = argv[i][2:].replace("-", "_")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            a[name], i = argv[i + 1], i + 2
        else:
            a[name], i = True, i + 1
    pp = int(a.get("pipeline_model_parallel_size", 1))
    first = int(a["decoder_first_pipeline_num_layers"]) if "decoder_first_pipeline_num_layers" in a else None
    last = int(a["decoder_last_pipeline_num_layers"]) if "decoder_last_pipeline_num_layers" in a else None
    emb = "account_for_embedding_in_pipeline_split" in a
    loss = "account_for_loss_in_pipeline_split" in a
    layout = a.get("pipeline_model_parallel_layout")
    per_v = a.get("num_layers_per_virtual_pipeline_stage")
    n_v = a.get("num_virtual_stages_per_pipeline_rank")
    # arguments.py: no more than one of the three
    _need(sum(x is not None for x in (per_v, n_v, layout)) <= 1, "more than one interleave argument")
    extra = int(emb) + int(loss)
    if layout is not None:
        stages = parse_layout(layout)
        _need(len(stages) % pp == 0, "layout length not divisible by pp")
        vp = len(stages) // pp
    elif per_v is not None:
        _need(first is None and last is None, "uneven first/last needs --num-virtual-stages-per-pipeline-rank")
        _need((num_layers + extra) % pp == 0, "layers not divisible by pp")
        _need(((num_layers + extra) // pp) % int(per_v) == 0, "layers per stage not divisible by per-chunk layers")
        vp = (num_layers + extra) // pp // int(per_v)
    elif n_v is not None:
        vp = int(n_v)
    else:
        vp = 1
        if first is None and last is None:
            _need((num_layers + extra) % pp == 0, "Number of layers should be divisible by the pipeline size")
    vpp = vp if vp > 1 else None
    if vpp is not None:  # arguments.py: interleaving needs pp > 2 without overlap_p2p_comm, > 1 with it
        _need(pp > 1, "interleaved schedule needs pp > 1")
    # TransformerConfig.__post_init__
    _need(not ((first is not None or last is not None) and (emb or loss)), "first/last with account-for")
    if layout is not None:
        _need(first is None and last is None and not emb and not loss, "layout with other layout arguments")
        grid = [[stages[v * pp + r] for v in range(vp)] for r in range(pp)]
        flat = [x for v in range(vp) for r in range(pp) for x in grid[r][v]]
        _need(flat and flat[0] == "E", "the first layer must be embedding")
        _need(flat[-1] == "L", "the last layer must be loss")
        _need(flat.count("E") == 1 and flat.count("L") == 1, "embedding and loss exactly once")
        _need(flat.count("t") == num_layers, "decoder layers must match num_layers")
        mtp = int(a.get("mtp_num_layers") or 0)
        _need(flat.count("m") == mtp, "the number of mtp layers must match mtp_num_layers")
        if mtp:
            where = [(r, v) for r in range(pp) for v in range(vp) if "m" in grid[r][v]]
            _need(
                len(where) == 1 and grid[where[0][0]][where[0][1]].count("m") == mtp,
                "all of the MTP layers must be in the same one virtual pipeline stage",
            )
            _need(where[0][1] == vp - 1, "MTP should be always in the last virtual pipeline stage of that rank")
            _need("t" not in "".join(flat[flat.index("m") :]), "decoder layers must be placed before MTP layers")
        return [[grid[r][v].count("t") for v in range(vp)] for r in range(pp)]
    if first is not None or last is not None:
        rest, middle = num_layers, pp
        for n in (first, last):
            if n is not None:
                _need(n > 0, "first/last stage layers must be larger than 0")
                _need(vpp is None or n % vpp == 0, "first/last stage layers divisible by vp")
                rest, middle = rest - n, middle - 1
        _need(bool(rest) == bool(middle), "middle layers and middle stages mismatch")
        _need(not middle or rest % middle == 0, "middle layers divisible by middle stages")
        _need(not middle or vpp is None or (rest // middle) % vpp == 0, "middle stage layers divisible by vp")
        per_rank = [rest // middle if middle else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
    else:
        _need((num_layers + extra) % pp == 0, "layers (+ embedding/loss) divisible by pp")
        per_rank = [(num_layers + extra) // pp] * pp
        _need(vpp is None or per_rank[0] % vpp == 0, "layers per rank divisible by vp")
    # transformer_block.get_num_layers_to_build
    out = []
    for r in range(pp):
        row = []
        for v in range(vp):
            n = per_rank[r] // vp if vpp is not None else per_rank[r]
            if emb and r == 0 and v == 0:
                n -= 1
            if loss and r == pp - 1 and v == vp - 1:
                n -= 1
            _need(n >= 0, "not enough layers in a virtual stage")
            row.append(n)
        out.append(row)
    return out


def expected_layers(c: ParallelConfig, num_layers: int) -> list[list[int]]:
    lps = c.layers_per_stage or (num_layers // c.pp,) * c.pp
    return [list(chunk_layers(n, c.vp, s, c.pp)) for s, n in enumerate(lps)]


def test_validator_follows_megatron_rules():
    assert megatron_layers("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2".split(), 8) == [
        [2, 2],
        [2, 2],
    ]
    assert megatron_layers(
        ["--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Et|(tt|)*2,tL"], 6
    ) == [[1, 2], [2, 1]]
    with pytest.raises(MegatronRefused):  # first/last not divisible by vp
        megatron_layers(
            "--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 "
            "--decoder-first-pipeline-num-layers 3".split(),
            15,
        )
    with pytest.raises(MegatronRefused):  # first/last with account-for
        megatron_layers(
            "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 3 "
            "--account-for-loss-in-pipeline-split".split(),
            15,
        )
    with pytest.raises(MegatronRefused):  # layout with another interleave argument
        megatron_layers(
            [
                "--pipeline-model-parallel-size",
                "2",
                "--num-virtual-stages-per-pipeline-rank",
                "2",
                "--pipeline-model-parallel-layout",
                "Et|tt|tt|tL",
            ],
            6,
        )


# --------------------------------------------------------------------------- chunks and Megatron's rules
def test_chunk_layers_even_and_uneven():
    assert chunk_layers(8, 1, 0, 4) == (8,)
    assert chunk_layers(8, 4, 2, 4) == (2, 2, 2, 2)
    # 15 = 2 x 8 - 1: the embedding's chunk (stage 0, first) or the loss's (last stage, last) is short
    assert chunk_layers(15, 8, 0, 8) == (1,) + (2,) * 7
    assert chunk_layers(15, 8, 7, 8) == (2,) * 7 + (1,)
    assert chunk_layers(7, 8, 0, 16) == (0,) + (1,) * 7  # an empty first virtual stage, as Megatron allows
    assert sum(chunk_layers(61, 7, 3, 8)) == 61


def test_megatron_split_rules():
    assert megatron_split(96, 4, 2) is None
    assert megatron_split(126, 16, embedding=True, loss=True) == (7,) + (8,) * 14 + (7,)
    assert megatron_split(94, 8, 4, embedding=True, loss=True) == (11,) + (12,) * 6 + (11,)
    assert megatron_split(95, 8, 4, embedding=True) == (11,) + (12,) * 7
    assert megatron_split(30, 4, 2, first=6) == (6, 8, 8, 8)
    assert megatron_split(26, 2, 1, last=10) == (16, 10)
    for kw in (dict(first=7, loss=True), dict(first=5), dict(first=6, last=6), dict(embedding=True)):
        with pytest.raises(SpecError):
            megatron_split(30, 4, 2, **kw)


def test_uneven_split_needs_no_multiple_of_vp_but_sums_to_the_layers():
    m, cl = load_model("gpt3-175b"), load_cluster("a100-80g").with_gpus(64)
    w = Workload(global_batch=64, seq_len=2048)
    validate_config(m, cl, w, ParallelConfig(tp=8, pp=8, vp=5, layers_per_stage=(11,) + (12,) * 6 + (13,)))
    with pytest.raises(SpecError, match="summing to layers=96"):
        validate_config(m, cl, w, ParallelConfig(tp=8, pp=8, layers_per_stage=(11,) + (12,) * 7))
    with pytest.raises(SpecError, match="at least one layer"):
        ParallelConfig(pp=2, layers_per_stage=(96, 0))


# --------------------------------------------------------------------------- the published plans
#: (id, model, cluster, GPUs, global batch, seq, config, how the split is stated, the split)
PUBLISHED = [
    # Llama 3 405B pre-training (Dubey et al. 2024, section 3.3.2 and Table 4): 16384 H100, TP8 PP16
    # CP1 DP128, batch 2048 x 8192; first and last stage one layer fewer (126 + 2 = 128 = 16 x 8).
    (
        "llama3.1-405b-pp16",
        "llama3.1-405b",
        "h100-sxm",
        16384,
        2048,
        8192,
        dict(tp=8, pp=16, mb=1, sp=True, zero=1),
        dict(account_for_embedding=True, account_for_loss=True),
        (7,) + (8,) * 14 + (7,),
    ),
    # NeMo's Llama 3.1 405B recipe: TP8 PP8 CP2 VP8, account_for_embedding/loss (128 / 8 = 16 = 8 x 2)
    (
        "llama3.1-405b-pp8v8",
        "llama3.1-405b",
        "h100-sxm",
        1024,
        2048,
        8192,
        dict(tp=8, pp=8, vp=8, cp=2, mb=1, sp=True, zero=1, recompute="selective"),
        dict(account_for_embedding=True, account_for_loss=True),
        (15,) + (16,) * 6 + (15,),
    ),
    # DeepSeek-V3's 61 layers on PP8 x v4 (EP64): the per-rank counts of Megatron-Bridge's
    # "Et|(tt|)*30mL" layout (32 virtual stages), no first/last or account-for form exists
    (
        "deepseek-v3-pp8v4",
        "deepseek-v3",
        "h800",
        1024,
        4096,
        4096,
        dict(tp=1, pp=8, vp=4, ep=64, mb=1, zero=1, recompute="full"),
        dict(),
        (7,) + (8,) * 6 + (6,),
    ),
    # Qwen3-235B-A22B (94 layers) on PP8 x v4 with EP32 (Megatron-MoE-ModelZoo shape): 94 + 2 = 96
    (
        "qwen3-235b-pp8v4",
        "qwen3-235b-a22b",
        "h100-sxm",
        256,
        1024,
        4096,
        dict(tp=2, pp=8, vp=4, ep=32, mb=1, sp=True, zero=1),
        dict(account_for_embedding=True, account_for_loss=True),
        (11,) + (12,) * 6 + (11,),
    ),
    # BLOOM-176B (BigScience 2022, section 3.4): 384 A100-80GB, TP4 PP12 DP8, batch 2048 x 2048,
    # ZeRO-1; Megatron-DeepSpeed counts the two embeddings as layers: 70 + 2 = 72 = 12 x 6
    (
        "bloom-176b-pp12",
        "bloom-176b",
        "a100-80g",
        384,
        2048,
        2048,
        dict(tp=4, pp=12, mb=2, zero=1, recompute="full"),
        dict(first_stage_layers=5, last_stage_layers=5),
        (5,) + (6,) * 10 + (5,),
    ),
]
IDS = [case[0] for case in PUBLISHED]


def _config(case) -> tuple:
    _, model, cluster, gpus, batch, seq, cfg, _, lps = case
    m, cl = load_model(model), load_cluster(cluster).with_gpus(gpus)
    dp = gpus // (cfg["tp"] * cfg["pp"] * cfg.get("cp", 1))
    return m, cl, Workload(global_batch=batch, seq_len=seq), ParallelConfig(dp=dp, layers_per_stage=lps, **cfg)


@pytest.mark.parametrize("case", PUBLISHED, ids=IDS)
def test_published_plan_is_rejected_without_its_split(case):
    m, cl, w, c = _config(case)
    from dataclasses import replace

    with pytest.raises(SpecError, match="pp\\*vp"):
        validate_config(m, cl, w, replace(c, layers_per_stage=None))


@pytest.mark.parametrize("case", PUBLISHED, ids=IDS)
def test_published_plan_evaluates_on_both_engines(case):
    m, cl, w, c = _config(case)
    a = evaluate(m, cl, w, c, engine="analytic")
    g = evaluate(m, cl, w, c, engine="graph")
    assert a.config.layers_per_stage == g.config.layers_per_stage == case[-1]
    assert 0 < a.step_time_s and 0 < g.step_time_s
    assert g.step_time_s == pytest.approx(a.step_time_s, rel=0.15)  # the engines agree
    assert 0.05 < g.mfu < 0.8


@pytest.mark.parametrize("case", PUBLISHED, ids=IDS)
def test_emitted_megatron_flags_reproduce_the_split(case):
    m, _, w, c = _config(case)
    argv = [t for arg in megatron_args(c, w.global_batch, m.layers) for t in arg]
    assert megatron_layers(argv, m.layers) == expected_layers(c, m.layers)
    # the shell text quotes the layout so that a shell gives Megatron the same words
    assert shlex.split(megatron_text(c, w.global_batch, m.layers).replace("\\\n", " ")) == argv


def test_each_plan_uses_the_megatron_form_that_states_it():
    forms = {case[0]: split_form(_config(case)[3], load_model(case[1]).layers)[0] for case in PUBLISHED}
    assert forms == {
        "llama3.1-405b-pp16": "first_last",
        "llama3.1-405b-pp8v8": "account",
        "deepseek-v3-pp8v4": "layout",
        "qwen3-235b-pp8v4": "account",
        "bloom-176b-pp12": "first_last",
    }


@pytest.mark.parametrize(
    "c, layers",
    [
        (ParallelConfig(pp=4, vp=2, layers_per_stage=(5, 4, 4, 3)), 16),  # no first/last form (5 % 2)
        (ParallelConfig(pp=3, vp=3, layers_per_stage=(2, 9, 1)), 12),  # empty virtual stages
        (ParallelConfig(pp=2, vp=1, layers_per_stage=(9, 3)), 12),  # first/last, no middle
        (ParallelConfig(pp=4, vp=2, layers_per_stage=(7, 8, 8, 8)), 31),  # account for the embedding only
        (ParallelConfig(pp=4, vp=3, layers_per_stage=(8, 8, 8, 7)), 31),  # ... the loss only
        (ParallelConfig(pp=5, vp=4, layers_per_stage=(13, 12, 11, 10, 9)), 55),  # every stage different
    ],
)
def test_any_split_emits_flags_that_reproduce_it(c, layers):
    argv = [t for arg in megatron_args(c, 64, layers) for t in arg]
    assert megatron_layers(argv, layers) == expected_layers(c, layers)


# --------------------------------------------------------------------------- the command line
def _argv(case) -> list[str]:
    _, model, cluster, gpus, batch, seq, cfg, split, _ = case
    out = ["--model", model, "--cluster", cluster, "--gpus", str(gpus), "--global-batch", str(batch), "--seq", str(seq)]
    for k, v in cfg.items():
        out += [f"--{k}"] if v is True else [f"--{k}", str(v)]
    for k, v in split.items():
        flag = "--" + k.replace("_", "-")
        out += [flag] if v is True else [flag, str(v)]
    return out


@pytest.mark.parametrize("case", PUBLISHED, ids=IDS)
def test_cli_states_the_split_megatron_style_and_emits_it(capsys, case):
    argv = _argv(case)
    if not case[7]:  # no Megatron rule states it: give the counts
        argv += ["--layers-per-stage", ",".join(map(str, case[-1]))]
    # the literal plan (plain evaluate would choose vp for the rows that do not state it)
    assert cli.main(["evaluate", *argv, "--framework-defaults", "--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    words = shlex.split(out.replace("\\\n", " "))
    m, _, _, c = _config(case)
    assert megatron_layers(words, m.layers) == expected_layers(c, m.layers)


def test_cli_layers_per_stage_sets_pp_and_shows_in_json(capsys):
    import json

    argv = [
        "evaluate",
        "--model",
        "bloom-176b",
        "--cluster",
        "a100-80g",
        "--gpus",
        "384",
        "--global-batch",
        "2048",
        "--seq",
        "2048",
        "--tp",
        "4",
        "--layers-per-stage",
        "5" + ",6" * 10 + ",5",
        "--json",
    ]
    assert cli.main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["pp"] == 12 and d["config"]["dp"] == 8 and d["config"]["layers_per_stage"][0] == 5


@pytest.mark.parametrize(
    "extra, field",
    [
        (["--pp", "8", "--layers-per-stage", "7,8,8,8,8,8,8,7"], "layers_per_stage"),  # sums to 62
        (["--pp", "8", "--layers-per-stage", "7,8"], "layers_per_stage"),  # 2 counts for 8 stages
        (["--pp", "8", "--layers-per-stage", "7,8,8,8,8,8,8,0"], "layers_per_stage"),  # an empty stage
        (["--pp", "8", "--first-stage-layers", "5", "--account-for-loss"], "first_stage_layers"),
        (["--pp", "8", "--layers-per-stage", "7,8,8,8,8,8,8,6", "--account-for-loss"], "account_for_loss"),
        (["--first-stage-layers", "5"], "pp"),  # no pp to split over
        (["--pp", "8", "--vp", "4", "--first-stage-layers", "6"], "first_stage_layers"),  # not a multiple of vp
        (["--pp", "8", "--account-for-embedding"], "layers"),  # 62 % 8
    ],
)
def test_cli_refuses_contradictions_with_one_line(capsys, extra, field):
    argv = [
        "evaluate",
        "--model",
        "deepseek-v3",
        "--cluster",
        "h800",
        "--gpus",
        "1024",
        "--global-batch",
        "4096",
        "--seq",
        "4096",
        "--ep",
        "64",
        *extra,
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{field}=" in err and "Traceback" not in err


def test_recommend_honours_a_pinned_split(capsys):
    argv = [
        "recommend",
        "--model",
        "bloom-176b",
        "--cluster",
        "a100-80g",
        "--gpus",
        "384",
        "--global-batch",
        "2048",
        "--seq",
        "2048",
        "--tp",
        "4",
        "--pp",
        "12",
        "--account-for-embedding",
        "--account-for-loss",
        "--time-limit",
        "20",
        "--json",
    ]
    import json

    assert cli.main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["layers_per_stage"] == [5] + [6] * 10 + [5]
    assert d["solve"]["status"] == "OPTIMAL"


def test_api_pins_a_split_with_any_vp():
    from planner import recommend

    r = recommend(
        "qwen3-235b-a22b",
        "h100-sxm",
        gpus=256,
        global_batch=1024,
        seq=4096,
        tp=2,
        ep=32,
        vp=4,
        pp=8,
        account_for_embedding=True,
        account_for_loss=True,
        time_limit_s=20,
    )
    assert r.status == "OPTIMAL"
    assert r.best.config.layers_per_stage == (11,) + (12,) * 6 + (11,) and r.best.config.vp == 4


def test_recommend_refuses_a_split_the_search_cannot_pin():
    from planner import recommend

    with pytest.raises(SpecError, match="first,mid,...,mid,last"):
        recommend(
            "gpt3-175b", "a100-80g", gpus=64, global_batch=64, seq=2048, tp=8, pp=4, layers_per_stage=(23, 24, 25, 24)
        )


def test_bloom_preset_matches_the_published_size():
    m = load_model("bloom-176b")
    assert (m.layers, m.hidden, m.heads, m.vocab, m.ffn_hidden, m.tied_embeddings) == (
        70,
        14336,
        112,
        250880,
        4 * 14336,
        True,
    )
    assert m.params == pytest.approx(176.2e9, rel=0.01)  # BigScience 2022: 176,247,271,424
