"""Carrying the core's decisions out, once for every driver.

`port` says what a machine's pass and a plan read and write (two Protocols); `interpreter`
carries a state machine's `Decision` out through a `MachinePort` and `plans` a planner's `Plan`
through a `ScalePort`; `memory` keeps those objects in memory, for `lightsout simulate` and the
unit tests, while `lightsout.execution` implements the ports over the Kubernetes API. `inputs`
reads objects into the state machine's inputs (typed specs, status), `nodeops` reads core
Nodes, `pool` chooses a clone's address. Nothing here imports a Kubernetes client.
"""
