"""The director: starts and stops a user's swarm service; owns placement and group properties, never nodes."""
