"""Regenerate the pictures and tables of the README's tour (run from the repository root).

    python docs/make_tour.py          # writes docs/img/*.png and updates README.md between markers

The tour's numbers come from the simulator, never by hand; tests/test_docs.py checks that the
README's tables equal what this script produces.
"""

from __future__ import annotations

import io
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOUR_RUN = ["run", "--out", "{out}", "--no-plot"]
TOUR_COMPARE = ["compare", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", "64", "--tp", "8",
                "--pp", "4", "--seq", "8192", "--gbs", "32"]
TOUR_SCHEDULE = ["schedule", "zb-h1", "--pp", "4", "--microbatches", "8"]


def cli_text(argv: list[str]) -> str:
    from simtrain.cli.main import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"simtrain {' '.join(argv)} failed with {code}")
    return buf.getvalue().rstrip()


def tour_blocks(tmp: Path) -> dict[str, str]:
    """The README blocks, keyed by marker name."""
    run = cli_text([a.format(out=tmp) for a in TOUR_RUN])
    run = "\n".join(line for line in run.splitlines() if not line.startswith("wrote ")).rstrip()
    return {
        "cli-reference": cli_reference(),
        "tour-run": "$ simtrain run\n" + run,
        "tour-compare": "$ simtrain " + " ".join(TOUR_COMPARE) + "\n" + cli_text(TOUR_COMPARE),
        "tour-schedule": "$ simtrain " + " ".join(TOUR_SCHEDULE) + "\n" + cli_text(TOUR_SCHEDULE),
    }


def cli_reference() -> str:
    """Every subcommand with its arguments, from the parser itself."""
    import argparse

    from simtrain.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    lines = []
    for name, p in sub.choices.items():
        lines.append(f"simtrain {name}: {helps.get(name, '')}")
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if action.option_strings:
                flag = ", ".join(action.option_strings)
                if action.nargs != 0:
                    flag += f" {action.metavar or action.dest.upper()}"
            else:
                choices = "|".join(action.choices) if action.choices else (action.metavar or action.dest)
                flag = choices
            text = (action.help or "").replace("%(default)s", str(action.default))
            if action.required:
                text = (text + " (required)").strip()
            lines.append(f"  {flag:<34} {text}".rstrip())
        lines.append("")
    return "\n".join(lines).rstrip()


def replace_block(text: str, name: str, body: str) -> str:
    pattern = block_pattern(name)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no block {name}")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(3), text)


def block_pattern(name: str) -> re.Pattern:
    """A README block: the marker, a text fence, its body (group 2), the closing fence and marker."""
    return re.compile(rf"(<!-- {name}:start -->\n```text\n)(.*?\n)?(```\n<!-- {name}:end -->)", re.S)


def main() -> None:
    import tempfile

    from simtrain import api
    from simtrain.outputs.gantt import draw_gantt
    from simtrain.workload.fixed_cost import run_schedule
    from simtrain.schedules import generate

    img = ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        blocks = tour_blocks(Path(tmp))
    result = api.simulate(api.resolve(None))
    api.write_outputs(result, img / "default")
    (img / "timeline.png").write_bytes((img / "default" / "timeline.png").read_bytes())
    for name in ("report.json", "trace.json", "timeline.png"):
        (img / "default" / name).unlink()
    (img / "default").rmdir()
    run = run_schedule(generate("zb-h1", 4, 8))
    draw_gantt(run.timeline, img / "zb-h1.png", textbook=True, title="zb-h1: p=4, m=8, F=I=W=1",
               rank_labels={r: f"rank {r}" for r in range(4)}, time_label="time (units of F)")
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    for name, body in blocks.items():
        text = replace_block(text, name, body)
    readme.write_text(text, encoding="utf-8")
    print("updated README.md and docs/img/", file=sys.stderr)


if __name__ == "__main__":
    main()
