"""Megatron-LM and NeMo training logs: the arguments they print at start-up, the step times after warm-up and the
sizes they report (:func:`scan_log`, :func:`parse_log`)."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from costmodel.spec.bounds import MAX_LOG_FILE_BYTES, read_text_file
from costmodel.spec.errors import SpecError
from . import megatron_args as mg


WARMUP_ENTRIES = 3


_ITER_MS = re.compile(r"elapsed time per iteration \(ms\):\s*(\S+)")


_NEMO_S = re.compile(r"train_step_timing in s[=:]\s*([^\s,\]]+)")


_PADDED = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")


_GLOBAL_BATCH = re.compile(r"global batch size:\s*(\d+)")  # Megatron-LM's iteration line (training_log)


_SIZES = re.compile(r"([a-z-]+) size: (\d+)")  # validate_args: "using world size: 16, data-parallel size: 4, ..."


_SIZE_ARGS = {
    "world": "world_size",
    "data-parallel": "data_parallel_size",
    "context-parallel": "context_parallel_size",
    "tensor-model-parallel": "tensor_model_parallel_size",
    "pipeline-model-parallel": "pipeline_model_parallel_size",
}


# --------------------------------------------------------------------------- logs
@dataclass(frozen=True)
class LogSummary:
    """What a training log states: its arguments (as text) and the per-iteration step times."""

    args: dict
    step_times_s: list
    first_line: int

    @property
    def step_time_s(self) -> float:
        return median_after_warmup(self.step_times_s)


def median_after_warmup(times: list, warmup: int = WARMUP_ENTRIES) -> float:
    """Median of ``times`` without the warm-up entries.

    >>> median_after_warmup([9.0, 2.0, 1.2, 1.0, 1.1, 1.0, 1.2, 1.1])
    1.1
    >>> median_after_warmup([5.0, 1.0, 1.2])
    1.1
    """
    skip = warmup if len(times) > 2 * warmup else min(1, len(times) - 1)
    return statistics.median(times[skip:])


def scan_log(path: Path, text: str | None = None) -> LogSummary:
    """The arguments and iteration times of a Megatron-LM or NeMo log, or of an excerpt of one.

    Arguments come from Megatron-LM's dump (``  name ..... value``; between the ``arguments``
    rulers when the log has them, anywhere when an excerpt lost them), else from NeMo's YAML; the
    start-up line ``using world size: N, data-parallel size: ...`` and the iteration lines'
    ``global batch size: B`` fill what the dump does not state. Nothing is required here
    (:func:`parse_log` requires the times); :func:`run_from_log` names whatever else a run needs
    and the log does not state."""
    text = _read(path) if text is None else text
    args, extra, times, in_block, first = {}, {}, [], False, 0
    lines = text.splitlines()
    has_block = any("arguments" in ln.lower() and "---" in ln for ln in lines)
    dotted = has_block or any(_ARG_LINE.search(ln) for ln in lines)
    for n, line in enumerate(lines, 1):
        low = line.lower()
        if "arguments" in low and "---" in line:
            in_block = "end of" not in low
            continue
        if m := _ITER_MS.search(line):
            times.append(_log_number(path, n, m.group(1), "elapsed time per iteration (ms)") / 1e3)
            first = first or n
            if g := _GLOBAL_BATCH.search(line):
                extra.setdefault("global_batch_size", g.group(1))
            continue
        if m := _NEMO_S.search(line):
            times.append(_log_number(path, n, m.group(1), "train_step_timing in s"))
            first = first or n
            continue
        if m := _PADDED.search(line):  # printed after the arguments, which show padded_vocab_size None
            args["padded_vocab_size"] = m.group(1)
            continue
        if "using world size:" in low:
            for name, value in _SIZES.findall(low):
                if name in _SIZE_ARGS:
                    extra.setdefault(_SIZE_ARGS[name], value)
            continue
        m = (_ARG_LINE.search(line) if in_block or not has_block else None) if dotted else _YAML_LINE.match(line)
        if m and m.group(2):
            value = m.group(2).strip().strip("'\"")
            if m.group(1) == "name" and value == "distributed_fused_adam":  # NeMo's optim section
                args.setdefault("use_distributed_optimizer", "True")
            if m.group(1) != "padded_vocab_size" or "padded_vocab_size" not in args:
                args.setdefault(m.group(1), value)
    args = mg.normalise(args)
    for k, v in extra.items():  # the dump, where it states them, is the run's own record
        if _none_text(args.get(k)):
            args[k] = v
    return LogSummary(args, times, first)


def parse_log(path: Path, text: str | None = None) -> LogSummary:
    """:func:`scan_log`, refused (:class:`SpecError`) without iteration times."""
    text = _read(path) if text is None else text
    log = scan_log(path, text)
    if not log.step_times_s:
        lines = len(text.splitlines())
        found = "the file is empty" if not text.strip() else f"none in its {lines:,} line{'s' if lines != 1 else ''}"
        raise SpecError(
            "runs",
            str(path),
            f"a training log with 'elapsed time per iteration (ms): X' (Megatron-LM) or 'train_step_timing in s=X' "
            f"(NeMo) lines ({found})",
        )
    return log


_ARG_LINE = re.compile(r"(?:^|\s)([a-z_][a-z0-9_]*) \.{2,} (.*?)\s*$")


_YAML_LINE = re.compile(r"^\s*([a-z_][a-z0-9_]*):\s+([^#{}\[\]]*?)\s*$")


def _read(path: Path) -> str:
    """The text of a log or run table: a regular file of at most :data:`MAX_LOG_FILE_BYTES` (bytes that are not
    UTF-8, a log's stray control output, read as replacement characters)."""
    return read_text_file(path, "runs", MAX_LOG_FILE_BYTES, what="log or run-table", strict=False)


def _none_text(v) -> bool:
    return v is None or str(v).strip().lower() in ("none", "null", "")


def _log_number(path, n, text, what) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SpecError(f"{path}:{n}: {what}", text, "a number") from None
    if not math.isfinite(v) or v <= 0:
        raise SpecError(f"{path}:{n}: {what}", text, "a positive number")
    return v
