"""What the objectives need of a device beyond the cluster preset: its board power limit (TDP) and the
bandwidth of its link to host memory, each with its source.

The cluster presets (``costmodel/spec/presets/clusters``) carry peak FLOP/s, HBM and the links between
GPUs; a device's power and its host (PCIe) link are read here, matched on the preset's device name
(:attr:`costmodel.spec.specs.DeviceSpec.name`). A device not listed (``sg2262-like``) has no defaults: the
caller states them (``tdp_w=``, ``host_gbps=``: :func:`board_tdp_w`, :func:`host_bytes_per_s`) or gets a :class:`~costmodel.spec.errors.SpecError`.

The host link is the PCIe link's peak in one direction (the datasheets print both directions summed: 128 GB/s
for PCIe Gen5 x16, 64 GB/s for Gen4 x16). A pinned device-to-host copy reaches less than the peak, so the copy
times built on it are lower bounds.

>>> f = device_facts("H100-SXM5-80GB")
>>> f.family, f.tdp_w, f.host_bytes_per_s / 1e9
('H100', 700.0, 64.0)
>>> board_tdp_w("SG2262-like")
Traceback (most recent call last):
...
costmodel.spec.errors.SpecError: device='SG2262-like': must be one of the devices with known power and host link (A100, B200, H100, H100-500W, H200, H800), or give tdp_w
>>> board_tdp_w("SG2262-like", 300)
(300.0, 'tdp_w=300 (stated)')
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.spec.errors import SpecError
from costmodel.spec.units import GB

#: PCIe Gen5 x16, one direction: 64 GB/s (NVIDIA H100 / H200 datasheets print "PCIe Gen5: 128GB/s", both ways)
PCIE_GEN5_X16 = 64 * GB
#: PCIe Gen4 x16, one direction: 32 GB/s (NVIDIA A100 datasheet prints "PCIe Gen4: 64GB/s", both ways)
PCIE_GEN4_X16 = 32 * GB


@dataclass(frozen=True)
class DeviceFacts:
    """A device family's board power limit and host link, with where each number comes from."""

    family: str
    tdp_w: float
    host_bytes_per_s: float
    sources: tuple[str, str]  # (TDP, host link)

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "tdp_w": self.tdp_w,
            "host_gbps": self.host_bytes_per_s / GB,
            "tdp_source": self.sources[0],
            "host_source": self.sources[1],
        }


#: family -> (name prefix of the preset's device, facts); the longest matching prefix wins
_FACTS = {
    "A100": (
        "A100-SXM4",
        DeviceFacts(
            "A100",
            400.0,
            PCIE_GEN4_X16,
            (
                "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), SXM: "
                "'Max TDP Power 400W'",
                "NVIDIA A100 datasheet: 'PCIe Gen4: 64GB/s' (both directions)",
            ),
        ),
    ),
    "H100": (
        "H100-SXM5",
        DeviceFacts(
            "H100",
            700.0,
            PCIE_GEN5_X16,
            (
                "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 'Max thermal design power (TDP) Up to 700W (configurable)'",
                "NVIDIA H100 datasheet: 'PCIe Gen5: 128GB/s' (both directions)",
            ),
        ),
    ),
    "H100-500W": (
        "H100-SXM-96GB-HBM2e-500W",
        DeviceFacts(
            "H100-500W",
            500.0,
            PCIE_GEN5_X16,
            (
                "the h100-96g preset's device name: torchtitan's H100s 'are non-standard ... limited to a lower TDP' "
                "(pytorch/torchtitan docs/performance.md)",
                "PCIe Gen5 x16, as H100",
            ),
        ),
    ),
    "H200": (
        "H200-SXM5",
        DeviceFacts(
            "H200",
            700.0,
            PCIE_GEN5_X16,
            (
                "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 'Up to 700W (configurable)'; MLCommons "
                "inference_results_v4.1 closed/NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json: 'H200 TGP 700W'",
                "NVIDIA H200 datasheet: 'PCIe Gen5: 128GB/s' (both directions)",
            ),
        ),
    ),
    "H800": (
        "H800-SXM5",
        DeviceFacts(
            "H800",
            700.0,
            PCIE_GEN5_X16,
            (
                "huggingface.co/hardware/h800: 700 W (a secondary source; the H800 is the H100 SXM board with fewer NVLink "
                "links)",
                "PCIe Gen5 x16, as H100",
            ),
        ),
    ),
    "B200": (
        "B200",
        DeviceFacts(
            "B200",
            1000.0,
            PCIE_GEN5_X16,
            (
                "MLCommons inference_results_v6.0 closed/Nebius/systems/nebius_b200_n1.json: 'B200 TGP 1000W'",
                "same file: 'accelerator_host_interconnect': 'PCIe Gen5 x16'",
            ),
        ),
    ),
}


def device_facts(device_name: str) -> DeviceFacts | None:
    """The table's facts for the device a preset names (the longest matching name prefix), or None."""
    hits = [(prefix, facts) for prefix, facts in _FACTS.values() if str(device_name).startswith(prefix)]
    return max(hits, key=lambda h: len(h[0]))[1] if hits else None


def board_tdp_w(device_name: str, tdp_w: float | None = None) -> tuple[float, str]:
    """(W, source): the board power limit of the device, ``tdp_w`` where the caller states it."""
    return _fact(device_name, "tdp_w", tdp_w, lambda f: (f.tdp_w, f.sources[0]), 1.0)


def host_bytes_per_s(device_name: str, host_gbps: float | None = None) -> tuple[float, str]:
    """(bytes/s, source): the device's host link, one direction; ``host_gbps`` (GB/s) where the caller states it."""
    return _fact(device_name, "host_gbps", host_gbps, lambda f: (f.host_bytes_per_s, f.sources[1]), GB)


def _fact(device_name, field, stated, read, unit) -> tuple[float, str]:
    if stated is not None:
        if isinstance(stated, bool) or not isinstance(stated, (int, float)) or not 0 < stated < float("inf"):
            raise SpecError(field, stated, "a positive finite number")
        return float(stated) * unit, f"{field}={stated:g} (stated)"
    facts = device_facts(device_name)
    if facts is None:
        raise SpecError(
            "device",
            device_name,
            f"one of the devices with known power and host link ({', '.join(sorted(_FACTS))}), or give {field}",
        )
    return read(facts)
