"""Tests of simtrain/cli/."""
