"""The Lights-Out API (`lightsout.dev/v1alpha1`) as pydantic models: the single source of truth.

`Node` and `Group` (with their Spec/Status) are parsed from and dumped to the objects the API
server stores (camelCase aliases, `ApiModel.to_dict()`); the CRDs in `crds/` are generated from
them by `lightsout.models.crd`. This package imports neither kopf nor the Kubernetes client, so
every layer above may use it.
"""
