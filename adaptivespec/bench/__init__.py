"""Benchmarks that measure side by side in one run and report ratios (these machines are noisy)."""
