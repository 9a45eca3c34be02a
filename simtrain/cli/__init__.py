"""The command line: one module per command group; flags come from :mod:`simtrain.settings`."""
