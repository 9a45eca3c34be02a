"""Tests of simtrain/topology/routing/."""
