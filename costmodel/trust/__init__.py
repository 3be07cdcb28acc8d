"""How far to trust an answer: calibration (the fitted constants), uncertainty bands (training and serving),
the band's scope and spread, sensitivity, robust scenarios, published-MFU ceilings and the memory margin.
Nothing below imports this folder. May import: ``costmodel.api`` and below.
"""
