"""Cost model: specs, presets, compute, collectives, memory, pipeline, overlap, estimate."""
