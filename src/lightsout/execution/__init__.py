"""Carrying decisions out: pure builders of Jobs, Leases and ConfigMaps, and the actuator.

`jobs` builds action Jobs and their extravars ConfigMaps, `leases` builds and judges the
per-machine coordination Leases, `results` turns a Job and its pods into an outcome the FSM
understands; these return plain dicts or frozen dataclasses and never call the API. The
`actuator` is the one part that applies effects, through `lightsout.k8s`.
"""
