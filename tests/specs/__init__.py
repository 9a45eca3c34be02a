"""Tests of simtrain/specs/."""
