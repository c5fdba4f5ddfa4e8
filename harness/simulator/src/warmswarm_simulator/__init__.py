"""A discrete-event simulator of a day of users: a modelled AWS and swarm, the real warmswarm planner, and a baseline.

It owns the models (cloud, swarm, machines, sessions), the workloads, the baseline policy and the report; it must not
change what it measures: the autoscaler is driven through its own ports, never patched.
"""
