"""warmswarm_demos: the local cloud driven as users and ops drive warmswarm (demos, the stack rehearsal, sessions)."""
