"""kopf glue: importing this package registers every handler of the operator.

Handlers are thin: they translate kopf causes into calls of the state builders, the pure
planners and the executors, and contain no policy of their own. Importing it also makes kopf's
start-up wait for its indexes linear in the objects (`kopfwait`).
"""

import kopf

from lightsout.execution import reconcile as rc
from lightsout.handlers import (
    admission,
    autoscale,
    externalgrpc,
    group,
    kopfwait,
    lifecycle,
    metrics,
    node,
    resync,
)

__all__ = [
    "admission",
    "autoscale",
    "externalgrpc",
    "group",
    "kopfwait",
    "lifecycle",
    "metrics",
    "node",
    "resync",
    "watch_secrets",
]

kopfwait.apply()


def watch_secrets() -> None:
    """Register the Secret watch (key names only, `node.key_names_of`) and what its events wake.

    Only a namespaced operator (`lightsout run -n`, the chart's `watchNamespaces`) calls this:
    it lists Secrets in its own namespaces, where the chart binds it. A cluster-wide operator
    is given no Secret access at all, so it does not check Secrets before a Job; a missing one
    then shows at once as the Job pod's `FailedMount` (`PodStartFailed`, naming the Secret)."""
    kopf.index("", "v1", "secrets", id=rc.SECRETS)(node.key_names_of)
    kopf.on.event("", "v1", "secrets", id="queue_secret")(node.reference_changed)
    # A machine's missing reference may have appeared.
    kopf.on.event("", "v1", "secrets", id="autoscaler_wake")(autoscale.autoscaler_wake)
