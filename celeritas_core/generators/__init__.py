"""Benchmark generators: synthetic task graphs and paper-shaped training steps."""
