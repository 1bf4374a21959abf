"""Pure decision code, in three rooms over the shared model (`types`, `policy`, `learning`).

- `machine`: one machine's pass, the power state machine (`machine.fsm.decide`: a machine's
  phase, intent and observations in, its next status and the effects to carry out) and what a
  pass reads beside it (`machine.passes`);
- `autoscaler`: the planner (`autoscaler.autoscale.plan`: a whole-cluster
  `lightsout.state.types.Snapshot` in, a `decisions.Plan` out: which machines to power on or
  off and why);
- `energy`: draws, accounts and their status (`energy.account`, `energy.status`).

`machine` and `autoscaler` never import each other. Nothing in this package performs I/O or
imports kopf or the Kubernetes client: the drivers (the operator's execution, the replay) build
inputs from objects, call these functions and carry out what they return through actuation.
"""
