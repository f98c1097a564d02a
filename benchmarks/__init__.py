"""Benchmarks and simulations that print their figures (see docs/performance.md)."""
