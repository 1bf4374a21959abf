"""kopf glue: importing this package registers every handler of the operator.

Handlers are thin: they translate kopf causes into calls of the state builders, the pure
planners and the executors, and contain no policy of their own.
"""

from lightsout.handlers import admission, autoscale, externalgrpc, group, lifecycle, metrics, node

__all__ = ["admission", "autoscale", "externalgrpc", "group", "lifecycle", "metrics", "node"]
