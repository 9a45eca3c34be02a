"""Tests of simtrain/outputs/."""
