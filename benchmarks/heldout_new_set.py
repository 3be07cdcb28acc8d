"""The new set's mean error with every fitted constant held out of the rows it is judged on.

    python -m benchmarks.heldout_new_set

``python -m benchmarks.calibrate --set all`` fits one constant per device family and dtype and prints,
per source, the value fitted without that source. This script predicts every new-set row with
the constants of its family set to the value fitted *without its own source* (re-fitting them
here with calibrate's grid and error matrix), and prints the mean |err| and signed mean of the
103 rows on both engines next to the in-sample figures of ``validate_published.py``: the number
to quote for runs the fit has not seen. Only families whose preset value is the fit over the new
set are re-fitted (Hopper BF16 GEMM efficiency); the others (A100 BF16, Hopper FP8, attention)
carry values fitted or derived without the new set.
"""

from __future__ import annotations

import statistics
import sys

from benchmarks.calibrate import held_out_constants, held_out_values, with_constants
from benchmarks.published import load_set, predict

#: (family label, device field) whose preset value is fitted on the new set
NEW_SET_FITS = [("H100-class BF16", "gemm_efficiency")]


def main() -> int:
    rows = [r for r in load_set("new") if not r.skip]
    values = held_out_values(rows, NEW_SET_FITS)
    for engine in ("graph", "analytic"):
        held, inside = [], []
        for r in rows:
            r2 = with_constants(r, held_out_constants(r, values))
            est, _ = predict(r2, engine=engine)
            est0, _ = predict(r, engine=engine)
            if est is None or est0 is None:
                continue
            held.append(est.step_time_s / r.measured_s - 1)
            inside.append(est0.step_time_s / r.measured_s - 1)
        print(
            f"{engine:<8} {len(held)} rows: held out mean |err| {100 * statistics.mean(map(abs, held)):.2f}% "
            f"signed {100 * statistics.mean(held):+.2f}%;  in-sample {100 * statistics.mean(map(abs, inside)):.2f}% "
            f"signed {100 * statistics.mean(inside):+.2f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
