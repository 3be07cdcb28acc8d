"""Serving: one forward pass of a prefill or decode (``phase``), a scheduler step's cost (``step``), each
engine's scheduler settings (``engines``) and loop (``scheduler``), the host time an engine's code puts before
the first token (``engine_host``), serving memory (``memory``) and the serving
estimate (``inference``: ``evaluate_inference``). May import: ``costmodel.engines`` and below.
"""
