"""Dollars of a run: GPU-hours (wall time x GPUs, lost time included) at a price per GPU-hour.

The price is the caller's (``gpu_hour_usd``, the CLI's ``--gpu-hour-usd``) or a default for the device family,
each named and dated with its source: on-demand list prices differ between providers and change often, so a
default is a reference point, never a quote. A device without a default needs ``gpu_hour_usd``.

Defaults (:data:`GPU_HOUR_USD`): the "Effective Accelerator Hourly Rate" of Amazon EC2 Capacity Blocks for ML, US
East, from the pricing page (aws.amazon.com/ec2/capacityblocks/pricing) as it stood before its update "scheduled
... on January 1, 2025": p5.48xlarge (8x H100) $4.916, p5e.48xlarge (8x H200) $5.408, p4d.24xlarge (8x A100 40 GB)
$1.844 per GPU-hour. The A100 rate is the 40 GB part's, used for both A100 presets.

>>> c = run_cost(gpus=16384, wall_s=30 * 86400, train_tokens=15e12, device_name="H100-SXM5-80GB")
>>> round(c.usd / 1e6, 1), round(c.usd_per_million_tokens, 2), c.price_source.startswith("AWS")
(58.0, 3.87, True)
>>> run_cost(gpus=8, wall_s=3600, train_tokens=1e9, device_name="B200")
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: gpu_hour_usd=None: must be a positive price in USD per GPU-hour: no default for device 'B200' (defaults: A100, H100, H200)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.spec.errors import SpecError

_AWS_CB = (
    "AWS EC2 Capacity Blocks for ML, US East, effective accelerator hourly rate, {instance} (pricing page "
    "before its 2025-01-01 update)"
)
#: family -> (device-name prefix, USD per GPU-hour, source)
GPU_HOUR_USD = {
    "H100": ("H100-SXM", 4.916, _AWS_CB.format(instance="p5.48xlarge, 8x H100")),
    "H200": ("H200-SXM", 5.408, _AWS_CB.format(instance="p5e.48xlarge, 8x H200")),
    "A100": ("A100-SXM4", 1.844, _AWS_CB.format(instance="p4d.24xlarge, 8x A100 40 GB")),
}


def gpu_hour_price(device_name: str, gpu_hour_usd: float | None = None) -> tuple[float, str]:
    """(USD per GPU-hour, source): ``gpu_hour_usd`` where given, else the device family's default."""
    if gpu_hour_usd is not None:
        if (
            isinstance(gpu_hour_usd, bool)
            or not isinstance(gpu_hour_usd, (int, float))
            or not 0 < gpu_hour_usd < math.inf
        ):
            raise SpecError("gpu_hour_usd", gpu_hour_usd, "a positive price in USD per GPU-hour")
        return float(gpu_hour_usd), f"gpu_hour_usd={gpu_hour_usd:g} (stated)"
    for prefix, usd, source in GPU_HOUR_USD.values():
        if str(device_name).startswith(prefix):
            return usd, source
    raise SpecError(
        "gpu_hour_usd",
        None,
        f"a positive price in USD per GPU-hour: no default for device "
        f"{str(device_name)!r} (defaults: {', '.join(sorted(GPU_HOUR_USD))})",
    )


@dataclass(frozen=True)
class RunCost:
    """Dollars of one run (or of serving at a rate)."""

    usd: float
    usd_per_million_tokens: float
    gpu_hours: float
    gpu_hour_usd: float
    price_source: str

    def to_dict(self) -> dict:
        return {
            "usd": self.usd,
            "usd_per_million_tokens": self.usd_per_million_tokens,
            "gpu_hours": self.gpu_hours,
            "gpu_hour_usd": self.gpu_hour_usd,
            "price_source": self.price_source,
        }


def run_cost(
    *, gpus: int, wall_s: float, train_tokens: float, device_name: str, gpu_hour_usd: float | None = None
) -> RunCost:
    """Dollars of ``gpus`` GPUs held ``wall_s`` seconds to train ``train_tokens`` tokens (a
    :class:`~costmodel.objectives.time_to_train.TimeToTrain` gives all three)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("gpus", gpus, "a positive integer")
    for name, value in (("wall_s", wall_s), ("train_tokens", train_tokens)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise SpecError(name, value, "a positive finite number")
    price, source = gpu_hour_price(device_name, gpu_hour_usd)
    hours = gpus * wall_s / 3600.0
    usd = hours * price
    return RunCost(usd, usd / (train_tokens / 1e6), hours, price, source)


def serving_cost(*, gpus: int, tokens_per_s: float, device_name: str, gpu_hour_usd: float | None = None) -> RunCost:
    """Dollars of one hour of serving on ``gpus`` GPUs at ``tokens_per_s``, and per million tokens served.

    >>> round(serving_cost(gpus=8, tokens_per_s=1e4, device_name="H100-SXM5-80GB").usd_per_million_tokens, 3)
    1.092
    """
    if isinstance(tokens_per_s, bool) or not isinstance(tokens_per_s, (int, float)) or not 0 < tokens_per_s < math.inf:
        raise SpecError("tokens_per_s", tokens_per_s, "a positive finite number")
    return run_cost(
        gpus=gpus, wall_s=3600.0, train_tokens=tokens_per_s * 3600.0, device_name=device_name, gpu_hour_usd=gpu_hour_usd
    )
