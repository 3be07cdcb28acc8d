"""A progress bar on stderr: cases done of total, rate, time left.

On a terminal it redraws one line; elsewhere (a log file, CI) it prints a line at most every
``interval_s`` seconds and when the sweep ends.

>>> import io
>>> s = io.StringIO()
>>> p = Progress(4, skipped=1, stream=s, clock=iter([0.0, 2.0, 4.0, 4.0]).__next__)
>>> p.update("ok"); p.update("error"); p.close()
>>> print(s.getvalue().splitlines()[-1])
sweep 3/4 [###############-----]  0.50 cases/s  ETA 0:00:02  (1 resumed, 1 failed)
"""

from __future__ import annotations

import sys
import time


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """Counts finished cases; ``skipped`` are those a resumed sweep found already done."""

    def __init__(
        self,
        total: int,
        *,
        skipped: int = 0,
        stream=None,
        enabled: bool = True,
        interval_s: float = 2.0,
        width: int = 20,
        clock=time.monotonic,
    ):
        self.total, self.skipped = total, skipped
        self.done = skipped
        self.failed = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s, self.width, self.clock = interval_s, width, clock
        self.t0 = clock()
        self._last_print = -float("inf")

    def line(self, now: float) -> str:
        ran = self.done - self.skipped
        dt = max(now - self.t0, 1e-9)
        rate = ran / dt
        left = self.total - self.done
        eta = _hms(left / rate) if rate > 0 else "?:??:??"
        filled = int(self.width * self.done / self.total) if self.total else self.width
        bar = "#" * filled + "-" * (self.width - filled)
        extra = []
        if self.skipped:
            extra.append(f"{self.skipped} resumed")
        if self.failed:
            extra.append(f"{self.failed} failed")
        tail = f"  ({', '.join(extra)})" if extra else ""
        n = len(str(self.total))
        return f"sweep {self.done:>{n}}/{self.total} [{bar}] {rate:5.2f} cases/s  ETA {eta}{tail}"

    def update(self, status: str = "ok") -> None:
        """One more case finished with ``status`` (anything but ``ok``/``infeasible`` counts as failed)."""
        self.done += 1
        if status not in ("ok", "infeasible"):
            self.failed += 1
        self._draw(final=False)

    def _draw(self, final: bool) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self.tty:
            self.stream.write("\r" + self.line(now) + ("\n" if final else ""))
        elif final or now - self._last_print >= self.interval_s:
            self.stream.write(self.line(now) + "\n")
            self._last_print = now
        self.stream.flush()

    def close(self) -> None:
        """The final line; none when cases were left and none finished (the sweep stopped before its first
        case, e.g. a Ray address refused: its one error line says so)."""
        if self.done == self.skipped < self.total:
            return
        self._draw(final=True)
