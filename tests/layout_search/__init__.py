"""Tests of simtrain/layout_search/."""
