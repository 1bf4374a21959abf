"""Frozen snapshots of the cluster for the autoscaling planner, and their builder.

`build.snapshot_from` turns raw API objects (pods, core Nodes, Lights-Out Nodes and Groups,
PodDisruptionBudgets, DaemonSets, CronJobs) into a `types.Snapshot` of frozen values; handlers
call it with their watch caches and pass the result to
`lightsout.planning.autoscaler.autoscale.plan`. Pure: no kopf, no Kubernetes client, no I/O.
"""
