"""`python -m warmswarm_director` runs the director."""

from warmswarm_director.main import run

run()
