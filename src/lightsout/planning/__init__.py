"""Pure decision code: the power state machine and the autoscaling planner.

`fsm.decide` takes one machine's phase, intent and observations and returns its next status and
the effects to apply (start a Job, cordon, drain, ...). `autoscale.plan` takes a whole-cluster
`lightsout.state.types.Snapshot` and returns a `decisions.Plan`: which machines to power on or
off and why (scale-up packing in `scaleup`/`packing`/`scheduling`, scale-down in `scaledown`, the
Group's choice policy in `policy`, explanations in `explain`).

Nothing in this package performs I/O or imports kopf or the Kubernetes client. Handlers build
frozen inputs from watched objects, call these functions, persist what they return and apply the
effects through `lightsout.k8s`.
"""
