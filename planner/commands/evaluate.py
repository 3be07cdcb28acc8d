"""``planner evaluate``: predict one training step of a given parallel plan.

A plan that does not fit in memory is not an error: the report says ``fits`` no and
names the stages that overflow. An invalid plan (e.g. tp not dividing heads) exits 2.
"""

from __future__ import annotations

import argparse

from costmodel.estimate import evaluate

from ..args import add_config_args, add_output_args, add_problem_args, config_from_args, problem_from_args
from ..report import estimate_json, estimate_text, print_json

NAME = "evaluate"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME, help="predict step time, throughput, MFU, memory and overlap of one plan",
        description=__doc__.splitlines()[0].split(": ", 1)[1])
    add_problem_args(p)
    add_config_args(p)
    add_output_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    model, cluster, workload = problem_from_args(args)
    config = config_from_args(args, cluster.num_gpus or None)
    est = evaluate(model, cluster, workload, config)
    if not cluster.num_gpus:
        cluster = cluster.with_gpus(config.gpus)
    if args.json:
        print_json(estimate_json(est, model, cluster, workload))
    else:
        print(estimate_text(est, model, cluster, workload))
    return 0
