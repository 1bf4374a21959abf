"""One machine's pass: the power state machine and what a pass reads beside it.

`fsm.decide` takes one machine's phase, intent and observations and returns a `effects.Decision`
(its next status and the effects to carry out: start a Job, cordon, drain, ...);
`passes.pass_decision` adds what the pass read beside the observations (the health check judged
by `healthjudge`, inspection by `inspection`, the learned draw, the energy checkpoint).
`outages` holds the retry and outage rules a failed action follows.
"""
