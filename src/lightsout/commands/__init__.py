"""Commands for people (`lightsout status`, `lightsout power`): what `cli.py` runs.

Each command is split in two: a pure part that turns resources (plain dicts as the API returns
them) into what is printed or decided, unit-tested with tables, and a thin loop in `cli.py` that
reads and writes through `lightsout.k8s`. Exit codes are part of the interface scripts rely on
(see `power.ExitCode`).
"""
