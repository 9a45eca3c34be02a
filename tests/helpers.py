"""Shared helpers for tests: small specs, a CLI runner."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

from simtrain.cli.main import main
from simtrain.specs.model import ModelSpec


def tiny_model(layers: int = 4, hidden: int = 1024, heads: int = 8, vocab: int = 32000) -> ModelSpec:
    return ModelSpec(name="tiny", hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
                     ffn=4 * hidden, vocab=vocab, gated_mlp=False)


def cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def cli_json(*argv: str) -> dict:
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def assert_user_error(*argv: str, contains: str | tuple[str, ...] = ()) -> str:
    """The CLI fails with exit status 2 and exactly one line on stderr containing ``contains``."""
    code, out, err = cli(*argv)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for text in (contains,) if isinstance(contains, str) else contains:
        assert text in lines[0], lines[0]
    return lines[0]
