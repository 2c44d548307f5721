"""Choosing γ: the cost-aware policy (alone and in a batch), its start-up calibration and the pass
costs learned online."""
