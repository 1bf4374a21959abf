"""The replay simulator behind `lightsout simulate`: know what Lights-Out saves before it runs.

Three rooms, each importing only the ones after it (an import-linter contract):

- `analysis`: what is computed from replays (the report, the energy breakdown, the offline
  optimum with HiGHS, the sweep, the plots);
- `replay`: the event loop in simulated time, its machines and pods on the in-memory port, its
  model of kube-scheduler, against the production planner (`planning.autoscaler.autoscale.plan`) and
  power state machine (`planning.machine.fsm`);
- `traces`: the workload trace format and what reads, validates, generates and records it.

Pure: no Kubernetes client, no kopf (an import-linter contract keeps it so).
"""
