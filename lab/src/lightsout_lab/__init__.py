"""The local Kubernetes control plane used by `make demo`, the tests and `lightsout dev-cluster`."""

from lightsout.devcluster.cluster import Cluster, ClusterError

__all__ = ["Cluster", "ClusterError"]
