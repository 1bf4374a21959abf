"""Lights-Out: a Kubernetes operator that powers machines on and off with demand."""

API_GROUP = "lightsout.dev"
API_VERSION = "v1alpha1"
__version__ = "0.1.0"
