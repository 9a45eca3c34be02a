"""Tests of simtrain/api/."""
