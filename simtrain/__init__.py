"""simtrain: a discrete-event simulator of one training step of a large transformer on a GPU cluster."""

__version__ = "0.1.0"
