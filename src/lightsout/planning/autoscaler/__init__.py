"""The autoscaling planner: a whole-cluster `Snapshot` in, a `decisions.Plan` out.

`autoscale.plan` decides which machines to power on or off and why: scale-up packing in
`scaleup`/`packing`/`scheduling` over the planner's working model of the cluster (`cluster`),
scale-down in `scaledown` (with `breakeven` and `windows`), pre-warming for CronJobs in
`prewarm`, explanations in `explain`, cluster-autoscaler's node groups in `nodegroups`; `wake`
says when to plan again.
"""
