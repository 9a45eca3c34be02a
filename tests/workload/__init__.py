"""Tests of simtrain/workload/."""
