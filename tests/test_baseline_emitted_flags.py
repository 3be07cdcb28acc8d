"""``recommend --baseline "<Megatron-LM line>"`` names the flags that change nothing in the plan, but never the
flags the planner itself emits (issue 42 item 9): its own ``--emit megatron`` line pasted back
(``--overlap-param-gather``, the architecture flags) warns about nothing; a misspelled flag still warns."""

import contextlib
import io
import warnings

import pytest

from planner import cli
from planner.baseline import parse_baseline

PLAN = ["--model", "llama3-70b", "--cluster", "h100-sxm", "--gpus", "64", "--global-batch", "128", "--seq", "8192",
        "--tp", "4", "--pp", "4", "--cp", "2", "--vp", "5", "--sp", "--dtype", "fp8", "--zero", "1",
        "--bucket-mb", "40", "--chunks", "4", "--recompute", "none", "--mb", "1"]  # fmt: skip


def _warnings(line: str) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fields = parse_baseline(line, 80)
    return fields, [str(w.message) for w in caught if "baseline" in str(w.message)]


@pytest.fixture(scope="module")
def emitted_line() -> str:
    """The Megatron-LM line ``planner evaluate --emit megatron`` prints for a Llama-3-70B plan."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["evaluate", *PLAN, "--emit", "megatron"]) == 0
    flags = [ln.rstrip(" \\") for ln in out.getvalue().splitlines() if ln.startswith("--")]
    assert "--overlap-param-gather" in flags and "--num-layers 80" in flags, flags
    return " ".join(flags)


def test_the_planners_own_line_warns_about_nothing(emitted_line):
    fields, warned = _warnings(emitted_line)
    assert not warned, warned
    assert (fields["tp"], fields["pp"], fields["cp"], fields["zero"]) == (4, 4, 2, 1)


def test_overlap_param_gather_as_the_issue_wrote_it():
    line = (
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --micro-batch-size 1 "
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
    )
    _, warned = _warnings(line)
    assert not warned, warned


def test_a_misspelled_flag_still_warns(emitted_line):
    _, warned = _warnings(emitted_line + " --overlap-param-gatherr")
    assert len(warned) == 1 and "--overlap-param-gatherr" in warned[0], warned
    assert "--overlap-param-gather," not in warned[0] and "--num-layers" not in warned[0]
