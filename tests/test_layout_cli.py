"""Layouts everywhere a split appears: ``evaluate`` chooses one where the layers do not divide
``pp * vp`` (the Megatron-Bridge flagship plans), ``--layout`` pins one, the JSON has ``layout``,
``--emit megatron`` prints it and :mod:`planner.megatron_args` reads the emitted line back to the
same plan. The emitted layout is checked against Megatron-Core's parser rules
(``pipeline_parallel_layer_layout.py`` at d98e8a64)."""

import json
import re
import shlex

import pytest

from costmodel.spec.layout import parse, validate
from costmodel.spec.presets import load_model
from planner import cli
from planner.megatron_args import config_fields, parse_command_line


def megatron_parse(text: str) -> list[list[str]]:
    """Megatron-Core's ``parse_str_to_list`` (its two regexes and the split on ``|``)."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    return [list(stage) for stage in text.split("|")]


#: (id, model, cluster, GPUs, global batch, seq, config flags): Megatron-Bridge's flagship shapes
#: (the issue's list) and Llama 3.1 405B's production PP16 (Dubey et al. 2024, section 3.3.2)
FLAGSHIP = [
    (
        "deepseek-v3-pp8v4",
        "deepseek-v3",
        "h800",
        1024,
        4096,
        4096,
        "--tp 1 --pp 8 --vp 4 --ep 64 --mb 1 --zero 1 --recompute full",
    ),
    (
        "qwen3-235b-pp8v4",
        "qwen3-235b-a22b",
        "h100-sxm",
        256,
        1024,
        4096,
        "--tp 2 --pp 8 --vp 4 --ep 32 --mb 1 --sp --zero 1",
    ),
    (
        "llama3.1-405b-pp8v8",
        "llama3.1-405b",
        "h100-sxm",
        1024,
        2048,
        8192,
        "--tp 8 --pp 8 --vp 8 --cp 2 --mb 1 --sp --zero 1 --recompute selective",
    ),
    ("llama3.1-405b-pp16", "llama3.1-405b", "h100-sxm", 16384, 2048, 8192, "--tp 8 --pp 16 --mb 1 --sp --zero 1"),
]


def _argv(case) -> list[str]:
    _, model, cluster, gpus, batch, seq, flags = case
    return [
        "evaluate",
        "--model",
        model,
        "--cluster",
        cluster,
        "--gpus",
        str(gpus),
        "--global-batch",
        str(batch),
        "--seq",
        str(seq),
        *flags.split(),
    ]


def _megatron_layers(text: str, pp: int) -> list[list[int]]:
    """Decoder layers on ``[pp_rank][vp_stage]`` as Megatron-Core reads the layout."""
    stages = megatron_parse(text)
    vp = len(stages) // pp
    return [[stages[v * pp + r].count("t") for v in range(vp)] for r in range(pp)]


@pytest.mark.parametrize("case", FLAGSHIP, ids=[c[0] for c in FLAGSHIP])
def test_a_flagship_plan_evaluates_without_a_written_split_and_emits_a_layout_megatron_accepts(capsys, case):
    layers, mtp = load_model(case[1]).layers, load_model(case[1]).mtp_layers
    assert cli.main(_argv(case) + ["--json", "--emit", "megatron"]) == 0
    d = json.loads(capsys.readouterr().out)
    pp, vp = d["config"]["pp"], d["config"]["vp"]
    lay = parse(d["layout"], pp)
    validate(lay, layers, mtp)  # Megatron-Core's rules (costmodel.spec.layout.validate)
    argv = d["megatron_args"]
    # the emitted arguments state exactly the evaluated layout, in whichever form Megatron takes
    if "--pipeline-model-parallel-layout" in argv:
        text = argv[argv.index("--pipeline-model-parallel-layout") + 1]
        assert len(megatron_parse(text)) % pp == 0 and len(megatron_parse(text)) // pp == vp
        assert _megatron_layers(text, pp) == [list(lay.chunks(r)) for r in range(pp)]
    # and read back (planner.megatron_args, as --baseline and calibrate read a line) it is the same plan
    back = config_fields(parse_command_line(" ".join(shlex.quote(t) for t in argv)), layers)
    got = parse(back["layout"], pp) if "layout" in back else None
    if got is None:
        from costmodel.spec.layout import from_split

        got = from_split(tuple(back.get("layers_per_stage") or (layers // pp,) * pp), back.get("vp", 1), mtp)
    assert got == lay and back.get("vp", 1) == vp
    assert d["fits"] in (True, False) and d["step_time_s"] > 0


def test_a_pinned_layout_is_the_one_evaluated_and_printed(capsys):
    text = "E|(tt|)*30tmL"  # 32 virtual stages (8 ranks x 4 chunks); rank 0's first holds only the embedding
    lay = parse(text, 8)
    validate(lay, 61, 1)  # DeepSeek-V3's MTP layer with the loss
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
        "--tp",
        "1",
        "--pp",
        "8",
        "--ep",
        "64",
        "--mb",
        "1",
        "--zero",
        "1",
        "--recompute",
        "full",
        "--layout",
        text,
    ]
    assert cli.main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert parse(d["layout"], 8) == lay and d["config"]["vp"] == 4 and parse(d["config"]["layout"], 8) == lay
    assert d["config"]["layers_per_stage"] == [6, 8, 8, 8, 8, 8, 8, 7]
    assert cli.main(argv) == 0
    assert f"pipeline layout: {lay}" in capsys.readouterr().out
    assert cli.main(argv + ["--emit", "megatron"]) == 0
    assert f'--pipeline-model-parallel-layout "{lay}"' in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, rule",
    [
        (["--layout", "Et|tL"], "pp"),  # no --pp
        (["--pp", "2", "--layout", "t*8|Et*8|(t*8|)*5t*8L"], "virtual stage 0"),
        (["--pp", "2", "--layout", "Et*40|t*39L"], "layers=80"),
        (["--pp", "2", "--vp", "2", "--layout", "Et*40|t*40L"], "vp=2"),
        (["--pp", "2", "--layout", "Et*40|t*40L", "--first-stage-layers", "40"], "first_stage_layers"),
    ],
)
def test_a_layout_megatron_would_refuse_exits_2_with_one_line(capsys, extra, rule):
    argv = [
        "evaluate",
        "--model",
        "llama3-70b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--seq",
        "4096",
        "--tp",
        "8",
        *extra,
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and rule in err
