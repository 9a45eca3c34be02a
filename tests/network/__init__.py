"""Tests of simtrain/network/."""
