"""Tests of simtrain/schedules/."""
