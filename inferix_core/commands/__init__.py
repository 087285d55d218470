"""Subcommands of the `inferix` CLI; each module exposes `register(subparsers)`."""
