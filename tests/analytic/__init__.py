"""Tests of simtrain/analytic/."""
