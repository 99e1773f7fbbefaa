"""Simulation and memory: the step-time simulator, per-device memory replay, bounds."""
