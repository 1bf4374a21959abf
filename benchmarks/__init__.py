"""Benchmarks: scripts that print figures (`make bench`), never tests."""
