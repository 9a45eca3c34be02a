"""Tests of simtrain/topology/."""
