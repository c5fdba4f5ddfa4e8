"""AWS's EC2 rules the harness plays (states, volumes, tokens, capacity, throttling, billing), pure and cited once."""
