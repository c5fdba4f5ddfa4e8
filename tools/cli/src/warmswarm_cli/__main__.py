"""`python -m warmswarm_cli` runs the `warmswarm` command."""

from warmswarm_cli.app import main

main()
