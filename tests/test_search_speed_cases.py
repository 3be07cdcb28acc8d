"""benchmarks/search_speed.py's standard set and the pair comparison's arithmetic (issue 37)."""

from benchmarks.speed_cases import CASES, selected
from benchmarks.search_speed_pairs import summary


def test_the_standard_set_times_gpt3_deepseek_v3_and_gpt_1t():
    assert sorted(c[0] for c in selected("standard")) == [
        "DeepSeek-V3 / 2048 H800",
        "GPT 1T / 3072 A100",
        "GPT-3 175B / 1024 A100",
    ]
    assert selected(None) == CASES  # the default runs every case, the three included
    assert [c[1:] for c in selected("GPT 1T")] == [("gpt-1t", "a100-80g", 3072, 3072, 2048)]


def test_pairs_are_compared_within_each_pair():
    old = [{"t": 1.0}, {"t": 2.0}, {"t": 1.0}]
    new = [{"t": 1.5}, {"t": 2.0}, {"t": 1.1}]
    s = summary(old, new, "t")
    assert (s["old"], s["new"]) == (1.0, 1.5)  # medians of each side
    assert (s["lo"], s["ratio"], s["hi"]) == (1.0, 1.1, 1.5)  # the pair ratios 1.5, 1.0, 1.1
