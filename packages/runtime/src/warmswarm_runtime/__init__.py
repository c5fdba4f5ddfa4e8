"""What both services run on and would otherwise each write: serving the API, JSON logs, settings errors, tokens.

It knows nothing of swarm, EC2 or groups; the services import it, never the other way round.
"""
