"""The Lights-Out lab: everything that starts local processes to develop, test, demonstrate and
benchmark the operator — the control plane built from Go modules, the hardware emulators, the
stand-in kubelet, the operator process wrapper, the Lab and the demo.

It imports `lightsout`; nothing in `lightsout` imports it (an import-linter contract), so the
operator's wheel and image carry none of it. Its command is `lightsout-lab`.
"""

from lightsout_lab.cluster import Cluster, ClusterError

__all__ = ["Cluster", "ClusterError"]
