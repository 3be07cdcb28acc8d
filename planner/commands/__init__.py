"""One module per subcommand, each exposing ``add_parser(subparsers)`` and ``run(args) -> int``.

Register a new module by appending its name to :data:`planner.cli.COMMANDS`.
"""
