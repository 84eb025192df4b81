"""The ``pde`` command: one subcommand per service, plus the one-machine demo."""
