"""cluster-autoscaler's `externalgrpc` cloud provider, served by the operator.

`servicer` adapts each RPC onto the pure functions of `lightsout.planning.autoscaler.nodegroups`,
reading the cluster and writing machines' `desiredPowerState` through `cluster`; `server` runs it
with TLS (or, only when asked, plaintext) and grpc.health.v1; `handlers.externalgrpc` starts and
stops it with the operator. `protos/` holds the .proto files; their Python stubs are generated
at build time (src/build_backend/lightsout_build.py) and never committed.
"""
