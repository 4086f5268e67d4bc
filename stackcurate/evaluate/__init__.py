"""Evaluating a trained checkpoint: benchmarks run in a sandbox, pass@k."""
