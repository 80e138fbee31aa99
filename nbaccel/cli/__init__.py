"""The ``nbaccel`` command line: one module per subcommand."""
