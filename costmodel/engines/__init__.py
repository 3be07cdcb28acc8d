"""The two engines, siblings that never import each other: the closed form (``analytic``) and the op-graph
engine (``graph``: op graphs scheduled on compute and DMA resources). May import: ``costmodel.compose`` and
below.
"""
