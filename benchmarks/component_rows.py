"""What the component benchmarks share about their data files (benchmarks/data/components/*.csv)."""


class RowError(ValueError):
    """A data row that cannot be read: names the case, the field, the value and what is allowed."""
