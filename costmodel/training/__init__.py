"""One training step: the ``Estimate`` and ``evaluate`` over either engine, and the fast path the search
scores with (``fastpath``). May import: ``costmodel.engines`` and below.
"""
