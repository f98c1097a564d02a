"""Benchmarks and simulations that print their figures (see the README)."""
