"""Pure decision code: the power state machine (`fsm`) and, later, the autoscaling planner.

Nothing in this package performs I/O or imports kopf or the Kubernetes client. Handlers build
frozen inputs from watched objects, call `fsm.decide`, persist the returned status and apply the
returned effects through `lightsout.k8s`.
"""
