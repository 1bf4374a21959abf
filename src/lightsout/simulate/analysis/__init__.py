"""What is computed from replays: the figures, the offline bound, and their pictures.

`report` turns a replay's `Result` into figures (energy and cost, savings against the
always-on reference, waits, power cycles, the reactive baseline beside them); `breakdown`
says where a replay's energy went, machine by machine and cause by cause, beside the bound's
schedule; `optimum` computes the offline bound with HiGHS; `sweep` replays one policy knob over
a range of values; `plot` draws a replay's timeline or a sweep.
"""
