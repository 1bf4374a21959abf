"""The replay: a trace played in simulated time against the operator's own code.

`engine` is the event loop (`replay(trace, options)` gives a `Result`) over simulated time
(`clock`); `machines` holds the simulated machines and pods, the in-memory port the one effect
interpreter and plan applier write to, each machine counting its energy by cause as it goes
(`charges`); `scheduler` is the model of kube-scheduler. It reads traces (`traces`) and knows
nothing of what is computed from its results (`analysis`).
"""
