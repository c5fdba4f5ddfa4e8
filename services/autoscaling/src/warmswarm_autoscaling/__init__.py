"""The autoscaler: observes swarm and EC2, plans (pure) and applies; main.py is its one wiring point."""
