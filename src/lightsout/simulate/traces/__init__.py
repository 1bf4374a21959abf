"""Workload traces: the format, and what reads, checks, makes and records it.

`trace` reads and writes a trace directory (the format docs/simulator.md documents), with
YAML read as `kubectl` reads it (`yamlfile`); `validate` checks one as the API server would;
`overrides` applies `--set` settings to its Groups; `generate` makes the shipped seeded weeks;
`record` turns what `lightsout trace record` observed in a live cluster into one. Nothing here
replays a trace or computes figures from one (an import-linter contract keeps it so).
"""
