"""What both engines share ("one model"): the overlap formula and its ledger (``overlap``), the TP/SP/EP
ledgers and reasons (``comm_ledgers``), the DP/ZeRO/optimizer terms of a stage (``stage_terms``), the pipeline
schedule's formulas (``schedule``) and the one step composition (``step``). May import: ``costmodel.physics``
and below.
"""
