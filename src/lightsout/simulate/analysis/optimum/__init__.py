"""The offline optimum of a trace: the least energy any schedule could use, by a real solver.

`model` states and builds the two models (the zero-wait MIP, the with-waits LP) in HiGHS'
row-wise form; `solver` hands them to HiGHS and says what the outcome proves (`solve`,
`Bound`); `realise` makes a schedule of real machines from a pooled solution and splits a
solution's energy by machine (`ScheduleEnergy`). `lightsout simulate --optimum` and the
benchmark call `solve`; docs/simulator.md states the model with its assumptions.
"""

from lightsout.simulate.analysis.optimum.model import Run, zero_wait_runs
from lightsout.simulate.analysis.optimum.realise import ScheduleEnergy
from lightsout.simulate.analysis.optimum.solver import (
    NO_BOUND,
    WITH_WAITS,
    ZERO_WAIT,
    Bound,
    SolverMissingError,
    solve,
)

__all__ = [
    "NO_BOUND",
    "WITH_WAITS",
    "ZERO_WAIT",
    "Bound",
    "Run",
    "ScheduleEnergy",
    "SolverMissingError",
    "solve",
    "zero_wait_runs",
]
