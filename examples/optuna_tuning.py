"""Optuna with the planner as a pruning oracle (needs ``pip install optuna``).

    python examples/optuna_tuning.py

Optuna proposes a plan; before spending a (real) trial on it, the planner says whether it is
valid, fits in memory and is predicted within 50 % of the best plan of the space. Only then
is it "measured" (here: the prediction with noise; replace ``measure`` with a real run).
"""

from __future__ import annotations

import random

import optuna

from planner import Planner, SpecError


def main(trials: int = 40, seed: int = 0):
    planner = Planner(model="llama3-8b", cluster="h100-sxm", gpus=16, global_batch=128, seq=4096)
    best_predicted = planner.rank(planner.space(mb_max=4))[0].step_time_s
    rng = random.Random(seed)
    measured_trials = []

    def measure(step_time_s: float) -> float:
        return step_time_s * rng.uniform(0.95, 1.05)

    def objective(trial: optuna.Trial) -> float:
        fields = {
            "tp": trial.suggest_categorical("tp", [1, 2, 4, 8]),
            "pp": trial.suggest_categorical("pp", [1, 2, 4]),
            "mb": trial.suggest_categorical("mb", [1, 2, 4]),
            "sp": trial.suggest_categorical("sp", [False, True]),
            "zero": trial.suggest_categorical("zero", [0, 1, 3]),  # Megatron-Core has no ZeRO-2
            "recompute": trial.suggest_categorical("recompute", ["none", "selective", "full"]),
        }
        fields["sp"] = fields["sp"] and fields["tp"] > 1  # sequence parallelism needs tp > 1
        try:
            config = planner.config(**fields)
        except SpecError:
            raise optuna.TrialPruned()  # tp * pp does not divide the GPUs
        score = planner.evaluate_many([config])[0]
        if not score.ok or score.step_time_s > 1.5 * best_predicted:
            raise optuna.TrialPruned()  # invalid, does not fit, or predicted too slow: no GPU hours spent
        measured_trials.append(trial.number)
        return measure(score.step_time_s)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=trials)
    print(
        f"{trials} trials proposed, {len(measured_trials)} measured, "
        f"{trials - len(measured_trials)} pruned by the planner"
    )
    print(f"best: {study.best_params} -> {study.best_value:.3f} s (best predicted {best_predicted:.3f} s)")
    return study


if __name__ == "__main__":
    main()
