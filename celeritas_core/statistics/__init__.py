"""Statistics: per-op cost fits, their model choice, and the champion/challenger test."""
