"""The command line: the settings table, the absl flags made from it, and their checks."""
