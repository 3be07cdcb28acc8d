"""An ask/tell autotuning loop: the planner prunes the space, a user function "measures" the rest.

    python examples/ask_tell.py

The planner enumerates every valid plan of the problem (``Planner.space``), keeps the few
predicted within 10 % of the best (``Planner.prune``), and the tuner then asks for one
candidate at a time, measures it with ``measure`` (here a stand-in for a real training run:
the prediction times a random factor) and tells the result back. Swap ``measure`` for a
function that launches a few training steps and returns the measured step time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from planner import ParallelConfig, Planner


@dataclass
class AskTellTuner:
    """Hands out candidates best-predicted first; remembers what each one measured."""

    candidates: list[ParallelConfig]
    results: dict = field(default_factory=dict)

    def ask(self) -> ParallelConfig | None:
        for c in self.candidates:
            if c not in self.results:
                return c
        return None

    def tell(self, config: ParallelConfig, step_time_s: float) -> None:
        self.results[config] = step_time_s

    def best(self) -> tuple[ParallelConfig, float]:
        return min(self.results.items(), key=lambda kv: kv[1])


def main(budget: int = 6, seed: int = 0) -> tuple[ParallelConfig, float]:
    planner = Planner(model="llama3-70b", cluster="h100-sxm", gpus=64, global_batch=256, seq=4096)
    space = planner.space(mb_max=4)  # every valid plan with uniform stages that fits in memory
    survivors = planner.prune(space, keep=budget, within=0.10)
    print(f"{len(space)} plans fit; {len(survivors)} within 10 % of the best prediction are worth measuring")

    rng = random.Random(seed)
    predicted = {s.config: s.step_time_s for s in survivors}

    def measure(config: ParallelConfig) -> float:
        """Stand-in for a real run: the prediction with +-5 % noise."""
        return predicted[config] * rng.uniform(0.95, 1.05)

    tuner = AskTellTuner([s.config for s in survivors])
    while (config := tuner.ask()) is not None:
        tuner.tell(config, measure(config))
    config, measured = tuner.best()
    c = config.to_dict()
    print(
        f"best measured: tp={c['tp']} pp={c['pp']} dp={c['dp']} cp={c['cp']} mb={c['mb']} vp={c['vp']} "
        f"sp={c['sp']} zero={c['zero']} recompute={c['recompute']}: {measured:.3f} s "
        f"(predicted {predicted[config]:.3f} s)"
    )
    return config, measured


if __name__ == "__main__":
    main()
