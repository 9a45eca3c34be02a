"""The closed-form model of one training step, its layout search, and its comparison with the
simulation."""
