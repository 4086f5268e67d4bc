"""The CLI's commands, one module per group; stackcurate/cli.py is the one dispatcher."""
