"""warmswarm_sandbox: a real local cloud on one machine for tests and the demo; it plays AWS, never imports services."""
