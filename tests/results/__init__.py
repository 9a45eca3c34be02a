"""Tests of simtrain/results/."""
