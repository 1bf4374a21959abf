"""The replay simulator behind `lightsout simulate`: know what Lights-Out saves before it runs.

`trace` reads and writes workload traces (docs/simulator.md), `generate` makes the shipped
seeded weeks, `engine` replays a trace in simulated time (`clock`) on the in-memory port
(`machines`) and a kube-scheduler model (`scheduler`) against the production planner
(`planning.autoscale.plan`) and power state machine (`planning.fsm`), `report` turns a replay
into figures, and `optimum` computes the offline bound with HiGHS.
Pure: no Kubernetes client, no kopf (an import-linter contract keeps it so).
"""
