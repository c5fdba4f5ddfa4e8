"""`python -m warmswarm_simulator`: the command line (cli.py)."""

from warmswarm_simulator.cli import main

raise SystemExit(main())
