"""The sanity bounds and value checks every spec runs on its fields.

Sizes far beyond any real model or cluster (:data:`MAX_SIZE`, :data:`MAX_HBM_BYTES`) are refused at once, and
the positive-number checks raise :class:`costmodel.spec.errors.SpecError` naming the field, the value and
what is allowed.
"""

from __future__ import annotations

from costmodel.spec.errors import SpecError
from costmodel.spec.units import GiB

#: HBM per device above which a spec is refused: a sanity bound, not a device limit (16 TiB is ~90x
#: B200's 180 GiB), that catches unit slips (GB given as bytes, ``hbm_gib: 1e30``) and infinities
MAX_HBM_BYTES = 16 * 1024 * GiB


#: sanity bounds on sizes, far beyond any real model or cluster: a typo (an extra three zeros)
#: is refused at once instead of running out of memory or time
MAX_SIZE = {
    "layers": 10_000,
    "hidden": 1_000_000,
    "heads": 100_000,
    "kv_heads": 100_000,
    "head_dim": 100_000,
    "ffn_hidden": 10_000_000,
    "moe_ffn_hidden": 10_000_000,
    "vocab": 100_000_000,
    "experts": 100_000,
    "shared_experts": 100_000,
    "q_lora_rank": 1_000_000,
    "kv_lora_rank": 1_000_000,
    "qk_rope_head_dim": 100_000,
    "v_head_dim": 100_000,
    "mtp_layers": 10_000,
    "num_gpus": 1_048_576,
    "gpus_per_node": 1_024,
    "sm_count": 100_000,
    "nvlink_domain": 1_024,
    "global_batch": 1_048_576,
    "seq_len": 100_000_000,
    "input_len": 100_000_000,
    "output_len": 100_000_000,
}


#: physical sanity ranges of the cluster's rates and times (issue: a link latency of 1e30 s, a bandwidth of 1e-30
#: or 1e300 GB/s or a peak of 1e300 TFLOP/s was accepted and priced as numpy overflow warnings, infinite tick
#: counts or nonsense): SI field -> (lowest, highest, whether 0 means "none", the key and factor of the unit a
#: cluster file states it in, that unit). Every bound is orders of magnitude beyond any real device (B300's 5,000
#: dense FP8 TFLOP/s, NVLink 5's 900 GB/s, HBM3e's 8 TB/s, a 14 us NIC step): 1 GFLOP/s to 1 EFLOP/s, 1 MB/s
#: to 1 EB/s, times up to 1 s
RANGES = {
    "peak_bf16_flops_per_s": (1e9, 1e18, False, "peak_bf16_tflops", 1e12, "TFLOP/s"),
    "peak_fp8_flops_per_s": (1e9, 1e18, True, "peak_fp8_tflops", 1e12, "TFLOP/s"),
    "hbm_bw_bytes_per_s": (1e6, 1e18, False, "hbm_bw_gbps", 1e9, "GB/s"),
    "kernel_overhead_s": (0.0, 1.0, True, "kernel_overhead_us", 1e-6, "us"),
    "bw_bytes_per_s": (1e6, 1e18, False, "bw_gbps", 1e9, "GB/s"),
    "latency_s": (0.0, 1.0, True, "latency_us", 1e-6, "us"),
    "nvls_tree_channel_bw_bytes_per_s": (1e6, 1e18, True, "nvls_tree_channel_bw_gbps", 1e9, "GB/s"),
    "nvls_tree_2node_channel_bw_bytes_per_s": (1e6, 1e18, True, "nvls_tree_2node_channel_bw_gbps", 1e9, "GB/s"),
}
_SI_UNIT = {"TFLOP/s": "FLOP/s", "GB/s": "B/s", "us": "s"}


def _in_range(spec, name: str, field: str | None = None, kind: str = "") -> None:
    """Raise SpecError (naming ``field``, default ``name``) when ``spec.name`` is outside its :data:`RANGES`.

    The allowed range is stated in the unit a cluster file uses and in SI; ``kind`` picks a zero-means-none rule
    other than the table's (``"zero"``: 0 allowed).

    >>> from types import SimpleNamespace
    >>> _in_range(SimpleNamespace(latency_s=1e30), "latency_s")
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: latency_s=1e+30: must be a number in [0, 1e+06] us (0 to 1 s; a sanity bound)
    """
    lo, hi, zero_ok, _, factor, unit = RANGES[name]
    zero_ok = zero_ok or kind == "zero"
    value = getattr(spec, name)
    if (zero_ok and value == 0) or lo <= value <= hi:
        return
    text = f"a number in [{lo / factor:g}, {hi / factor:g}] {unit} ({lo:g} to {hi:g} {_SI_UNIT[unit]}; a sanity bound)"
    raise SpecError(field or name, value, f"0 (none) or {text}" if zero_ok and lo > 0 else text)


def _bounded(spec) -> None:
    """Raise SpecError for the first field of ``spec`` above its :data:`MAX_SIZE`."""
    for name, most in MAX_SIZE.items():
        value = getattr(spec, name, None)
        if isinstance(value, int) and value > most:
            raise SpecError(name, value, f"at most {most:,} (a sanity bound)")


def _positive(name: str, value, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < 0 or (value == 0 and not allow_zero) or value != value:
        raise SpecError(name, value, "a non-negative number" if allow_zero else "a positive number")


def _positive_int(name: str, value, allow_zero: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (value == 0 and not allow_zero):
        raise SpecError(name, value, "a non-negative integer" if allow_zero else "a positive integer")


#: the largest model, cluster, grid or framework-config file read: 16 MiB. A Hugging Face ``config.json`` is
#: a few kB (DeepSeek-V3's 1.7 kB), a preset under 10 kB; anything larger is the wrong file (a checkpoint, a
#: device such as ``/dev/zero``) and is refused before a byte is parsed
MAX_SPEC_FILE_BYTES = 16 * 2**20
#: the largest training log or run table read by ``planner calibrate``: 64 MiB (a Megatron-LM log prints one
#: ~400-byte line per logged iteration: 100,000 of them are ~40 MB)
MAX_LOG_FILE_BYTES = 64 * 2**20


def read_text_file(
    path, field: str, most: int = MAX_SPEC_FILE_BYTES, *, what: str = "text", strict: bool = True
) -> str:
    """The text of the file ``path``, read only if it is a regular file of at most ``most`` bytes.

    A directory, device (``/dev/zero``), FIFO or socket, a file over the limit or (``strict``) one that is not
    UTF-8 text is refused with one :class:`SpecError` naming ``field`` and the path; ``what`` says what the file
    should be (``JSON/YAML`` ...). The read itself stops at ``most + 1`` bytes (a file that grows, ``/proc``).

    >>> read_text_file("/dev/zero", "model")
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: model='/dev/zero': must be a regular file (a character device was given)
    """
    import os
    import stat

    name = os.fspath(path)
    try:
        st = os.stat(name)  # follows links; never opens (a FIFO would block)
    except (OSError, ValueError) as e:
        raise SpecError(field, name, f"a readable file ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(st.st_mode):
        kinds = (
            (stat.S_ISDIR, "directory"),
            (stat.S_ISCHR, "character device"),
            (stat.S_ISBLK, "block device"),
            (stat.S_ISFIFO, "FIFO"),
            (stat.S_ISSOCK, "socket"),
        )
        kind = next((k for test, k in kinds if test(st.st_mode)), "special file")
        raise SpecError(field, name, f"a regular file (a {kind} was given)")
    too_big = SpecError(
        field, name, f"a {what} file of at most {most // 2**20} MiB (this one is {st.st_size / 2**20:,.0f} MiB)"
    )
    if st.st_size > most:
        raise too_big
    try:
        with open(name, "rb") as fh:
            data = fh.read(most + 1)
    except OSError as e:
        raise SpecError(field, name, f"a readable file ({e.strerror})") from None
    if len(data) > most:
        raise too_big
    try:
        return data.decode("utf-8", errors="strict" if strict else "replace")
    except UnicodeDecodeError as e:  # a binary file (a checkpoint, an archive) given as a spec
        raise SpecError(field, name, f"a UTF-8 {what} file (byte {e.start} is not text)") from None


def most_pp_for_vp(layers: int, vp: int) -> int:
    """The largest pipeline degree an interleave of ``vp`` chunks per stage can have on ``layers`` layers, refusing
    (:class:`SpecError` naming ``vp``) an interleave no pipeline can hold.

    The virtual stages ``pp * vp`` are at most ``layers + 2``: each holds a decoder layer, but for the
    embedding and the loss, which Megatron-Core may place alone in one each (``search.candidates.most_virtual_stages``,
    the bound the search uses for every framework's layout); and an interleave needs ``pp >= 2``. A pinned ``vp``
    beyond that is refused before the search builds a table of ``vp`` chunks for each ``pp`` (issue 42:
    ``--vp 1000`` on GPT-3's 96 layers ran for more than 8 minutes).

    >>> most_pp_for_vp(96, 4)
    24
    >>> most_pp_for_vp(96, 1000)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: vp=1000: must be at most 49 for 96 layers (pp*vp virtual stages, pp >= 2, hold at most layers + 2 = 98)
    """
    most = (layers + 2) // vp
    if vp > 1 and most < 2:
        raise SpecError(
            "vp",
            vp,
            f"at most {(layers + 2) // 2} for {layers} layers "
            f"(pp*vp virtual stages, pp >= 2, hold at most layers + 2 = {layers + 2})",
        )
    return most


def check_virtual_stages(layers: int, pp: int | None, vp: int | None) -> None:
    """Refuse (:class:`SpecError`) a stated interleave no pipeline of ``layers`` layers can hold: ``pp * vp``
    virtual stages beyond ``layers + 2`` (:func:`most_pp_for_vp`), ``pp`` unstated or not. ``evaluate`` of
    ``pp=2 vp=1000`` on GPT-3 otherwise prices 2,000 chunks for two minutes (issue 42).

    >>> check_virtual_stages(94, 32, 3)  # the Megatron-MoE-ModelZoo's Qwen3-235B-A22B run: 96 of 94 + 2
    >>> check_virtual_stages(96, 2, 1000)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: pp*vp=2000: must be at most layers + 2 = 98 (pp=2, vp=1000: each virtual stage holds a layer, the embedding or the loss)
    """
    if not vp or vp <= 1:
        return
    if not pp:
        most_pp_for_vp(layers, vp)
    elif pp * vp > layers + 2:
        raise SpecError(
            "pp*vp",
            pp * vp,
            f"at most layers + 2 = {layers + 2} (pp={pp}, vp={vp}: each virtual stage holds a layer, the "
            "embedding or the loss)",
        )
