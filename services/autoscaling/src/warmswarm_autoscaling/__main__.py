"""`python -m warmswarm_autoscaling` runs the autoscaler."""

from warmswarm_autoscaling.main import run

run()
