"""Counts of tokens on the command line: decimal suffixes and exponents, whole numbers only, and
one line naming the value and what is valid otherwise."""

from __future__ import annotations

import argparse

import pytest

from helpers import assert_user_error, cli_json
from simtrain.cli.types import parse_count

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("text, value", [
    ("1T", 10**12), ("1t", 10**12), ("1.5e12", 1_500_000_000_000), ("300B", 300 * 10**9), ("2.5K", 2500),
    ("7M", 7 * 10**6), ("1e12", 10**12), ("4096", 4096), (" 12 ", 12), ("1.5E3", 1500), (".5K", 500),
])
def test_counts_take_decimal_suffixes_and_exponents(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text, words", [
    ("1.5", "1.5 is not a whole number"), ("1.2345K", "1234.5 is not a whole number"),
    ("abc", "expected a whole number, digits with an optional exponent or suffix K, M, B, T"),
    ("1T5", "expected a whole number"), ("1G", "expected a whole number"), ("1_000", "expected a whole number"),
    ("1e400", "beyond 1e30"), ("9" * 5000, "beyond 1e30"),
])
def test_a_count_that_is_not_a_whole_number_is_refused(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        parse_count(text)


RUN = ("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 8, "--tp", 8, "--pp", 1, "--seq", 1024,
       "--gbs", 8, "--no-plot")


@pytest.mark.parametrize("text, words", [
    ("-1T", "argument --train-tokens: -1T must be >= 1"), ("0", "argument --train-tokens: 0 must be >= 1"),
    ("1.5", "argument --train-tokens: invalid count '1.5': 1.5 is not a whole number"),
    ("1e30", "train_tokens = 1000000000000000000000000000000: out of range"),
])
def test_bad_train_tokens_are_one_line(tmp_path, text, words):
    assert_user_error(*RUN, "--out", tmp_path, "--train-tokens", text, contains=words)


def test_train_tokens_1t_is_a_trillion(tmp_path):
    a = cli_json(*RUN, "--out", tmp_path / "a", "--train-tokens", "1T")
    b = cli_json(*RUN, "--out", tmp_path / "b", "--train-tokens", "1000000000000")
    assert a["config"]["train_tokens"] == 10**12 and a["train_steps"] == b["train_steps"] == -(-10**12 // 8192)
