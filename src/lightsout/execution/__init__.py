"""Carrying decisions out: pure builders of Jobs, Leases and ConfigMaps, and the actuator."""
