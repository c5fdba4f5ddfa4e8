"""The fault campaign: the real reconciler over the modelled cloud and swarm, with faults, checked every cycle."""
