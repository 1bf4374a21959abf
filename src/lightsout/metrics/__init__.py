"""Prometheus metrics of the operator, served on their own port at `/metrics`.

`families` declares every metric (names and labels follow Prometheus conventions: the
`lightsout_` prefix, units in the name, `_total` counters, labels of bounded cardinality);
`machines` derives the machine figures from the Nodes the operator watches (phases, finished
actions, time to reach a desired state) without touching the reconcile path; `energy` exports
each machine's power state, draw and energy counters from the accounts in status; the
autoscaler and the Lease code count their own events. The default registry also carries the
process's own figures (memory, CPU, open files), which every replica exports; only the replica
leading the autoscaler exports autoscaler figures.
"""
