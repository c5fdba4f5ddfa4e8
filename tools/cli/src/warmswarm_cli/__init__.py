"""The `warmswarm` operator CLI: reads and changes warmswarm only through the services' HTTP APIs, never their code."""
