"""The README and the manual (docs/*.md): the README's two set-up commands, its length and its links
to every page, the generated blocks (tour, settings and CLI reference, report keys, module map),
the examples, the pictures."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from helpers import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "docs"))
#: The README's "Manual" list: every page of docs/, in the order the README gives them.
MANUAL = re.findall(r"^- \[[^]]+\]\(docs/([\w-]+\.md)\)", README.split("\n## Manual\n", 1)[-1], re.M)
#: The pages in reading order (the README, then the manual as listed), name -> text.
PAGES = {"README.md": README, **{f"docs/{name}": (ROOT / "docs" / name).read_text(encoding="utf-8")
                                 for name in MANUAL}}
ALL_TEXT = "\n".join(PAGES.values())
README_MAX_LINES = 250


def page(name: str) -> str:
    return PAGES[f"docs/{name}"]


@pytest.mark.quick
def test_readme_starts_with_the_two_commands():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert README.startswith("# simtrain\n\n```bash\n")
    assert len(first) == 2
    assert first[0].endswith("pip install . && simtrain run")
    test_cmd = first[1].split(".venv/bin/activate && ", 1)[1]  # after creating and activating the venv
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


@pytest.mark.quick
def test_readme_is_short_and_links_every_page():
    """At most :data:`README_MAX_LINES` lines; its "Manual" list links every docs/*.md page once,
    and each page starts with its title and a one-line summary."""
    assert len(README.splitlines()) <= README_MAX_LINES
    assert "\n## Manual\n" in README
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(MANUAL) == pages, f"README's Manual list against docs/: {MANUAL} vs {pages}"
    for name in pages:
        text = (ROOT / "docs" / name).read_text(encoding="utf-8")
        lines = text.splitlines()
        assert lines[0].startswith("# ") and lines[1] == "" and lines[2] and lines[3] == "", name
        assert not any(line.startswith("# ") for line in _outside_fences(lines[1:])), f"{name}: two titles"


def _outside_fences(lines: list[str]) -> list[str]:
    out, fence = [], False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out.append(line)
    return out


@pytest.mark.quick
def test_relative_links_resolve():
    """Every relative link and picture of the README and the pages names a file that exists, and
    an anchor into a page names one of its headings."""
    for name, text in PAGES.items():
        base = (ROOT / name).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", "\n".join(_outside_fences(text.splitlines()))):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (base / path).resolve() if path else ROOT / name
            assert file.exists(), f"{name}: link to {target}: no such file"
            if anchor and file.suffix == ".md":
                heads = re.findall(r"^#+ (.*)$", "\n".join(_outside_fences(file.read_text().splitlines())), re.M)
                slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}
                assert anchor in slugs, f"{name}: link to {target}: no such heading"


@pytest.mark.quick
def test_readme_top_says_which_presets_are_hardware_models():
    """Before the tour: the default seed-h100 is the course notes' flat-0.6 GPU, and every other
    topology `simtrain list topologies` shows is named as a hardware model to plan with."""
    import json

    top = README.split("## A five-minute tour", 1)[0]
    code, out, err = cli("list", "topologies", "--json")
    assert code == 0, err
    names = [t["name"] for t in json.loads(out)]
    assert "seed-h100" in names and "h100-ib" in names and "b200-ib" in names and "a100-hdr" in names
    assert "`seed-h100`" in top and "course notes" in top and "flat 0.6" in top
    missing = [n for n in names if n != "seed-h100" and f"`{n}`" not in top]
    assert not missing, f"presets the README's top does not name: {missing}"


@pytest.mark.quick
def test_the_command_table_lists_every_command():
    """Every command `simtrain --help` lists has a row of the command table (docs/commands.md)."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "simtrain", "--help"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    commands = re.findall(r"^    (\w+)", out, re.M)  # the COMMAND list: a name after four spaces
    assert {"run", "search", "whatif", "calibrate", "schedule", "list"} <= set(commands), out
    table = next(b for b in page("commands.md").split("\n\n") if b.startswith("| command |"))
    missing = [c for c in commands if f"| `simtrain {c}" not in table]
    assert not missing, f"commands missing from the command table of docs/commands.md: {missing}"


def _assert_current(blocks: dict[str, str]) -> None:
    import make_tour

    texts = {p: p.read_text(encoding="utf-8") for p in make_tour.pages()}
    for name, body in blocks.items():
        holder = make_tour.holder(name, texts)  # exactly one page holds it
        m = make_tour.block_pattern(name).search(texts[holder])
        where = holder.relative_to(ROOT).as_posix()
        assert m.group(2) == body, f"{where}: block {name} is stale: run python docs/make_tour.py --text"


def test_tour_blocks_are_current(tmp_path):
    import make_tour

    _assert_current(make_tour.tour_blocks(tmp_path))


def test_cli_reference_and_module_map_are_current():
    """The settings table, the CLI reference, the report keys and the module map equal what the
    code gives now."""
    import make_tour

    blocks = make_tour.reference_blocks()
    assert set(blocks) == {"settings", "cli-reference", "report-keys", "module-map"}
    _assert_current(blocks)


def test_module_map_lists_every_module_in_data_flow_order():
    import make_tour

    text = make_tour.module_map()
    modules = sorted(p for p in (ROOT / "simtrain").rglob("*.py") if p.name != "__init__.py")
    for path in modules:
        assert f"(../{path.relative_to(ROOT).as_posix()})" in text  # relative to docs/modules.md
    flow = make_tour.FLOW
    heads = [flow.index(h) if h in flow else len(flow) for h in re.findall(r"^- \[`simtrain/(\w+)", text, re.M)]
    assert heads == sorted(heads)
    assert "[`simtrain/engine/simulator.py`](../simtrain/engine/simulator.py): " in text  # with its docstring's summary


@pytest.mark.quick
def test_every_report_key_is_documented():
    """Each key of report.json and of the closed form's report has its own line in docs/report.md."""
    from typing import get_type_hints

    from simtrain.analytic.model import AnalyticReport
    from simtrain.results.metrics import Report

    lines = [line for line in page("report.md").splitlines() if line.startswith("- `") and ": " in line]
    for key in {*get_type_hints(Report), *get_type_hints(AnalyticReport)}:
        assert any(f"`{key}`" in line.split(": ", 1)[0] for line in lines), f"report key {key} is undocumented"


@pytest.mark.quick
def test_every_flag_is_documented():
    import argparse

    from simtrain.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f"simtrain {name}" in ALL_TEXT
        for action in p._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in ALL_TEXT, f"simtrain {name} {flag} is in neither the README nor docs/"


def readme_examples() -> list[str]:
    """The commands of every ```bash block, in reading order: the README, then the pages in the
    order of its Manual list."""
    out = []
    for name, text in PAGES.items():
        blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
        for block in blocks[1:] if name == "README.md" else blocks:  # the README's first is the set-up
            for cmd in block.replace("\\\n", " ").splitlines():
                cmd = " ".join(cmd.split())
                if cmd.startswith("simtrain "):
                    out.append(cmd)
    return out


def test_readme_examples_run(tmp_path, monkeypatch):
    """Every example, in reading order in one folder (a later one reads what an earlier one wrote,
    so they must not be spread over test workers)."""
    monkeypatch.chdir(tmp_path)
    for cmd in readme_examples():
        code, out, err = cli(*cmd.split()[1:])
        assert code == 0, f"{cmd}: {err}"


def python_examples() -> list[tuple[str, str]]:
    """(page, code) of every ```python block of the README and the docs pages."""
    return [(name, block) for name, text in PAGES.items() for block in re.findall(r"```python\n(.*?)```", text, re.S)]


def test_python_examples_use_only_the_top_level_api_and_run(tmp_path, monkeypatch, capsys):
    """Each Python example imports ``simtrain`` or names of its ``__all__``, reads nothing below
    them (``simtrain.x.y``), and runs."""
    import ast

    import simtrain

    examples = python_examples()
    assert examples, "the README shows the Python API"
    monkeypatch.chdir(tmp_path)
    for name, code in examples:
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                assert all(a.name == "simtrain" or not a.name.startswith("simtrain") for a in node.names), name
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simtrain"):
                assert node.module == "simtrain" and all(a.name in simtrain.__all__ for a in node.names), name
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "simtrain":
                assert node.attr in simtrain.__all__, f"{name}: simtrain.{node.attr}"
        exec(compile(code, name, "exec"), {})
    assert "step " in capsys.readouterr().out


@pytest.mark.quick
def test_the_api_page_names_every_public_name():
    import simtrain

    text = PAGES["docs/api.md"]
    missing = [name for name in simtrain.__all__ if f"`{name}" not in text]
    assert not missing, missing


@pytest.mark.quick
def test_readme_examples_found():
    """The 18 examples of the manual, none dropped."""
    assert len(readme_examples()) >= 18


@pytest.mark.quick
@pytest.mark.parametrize("name", ["timeline.png", "zb-h1.png", "dualpipev-pair.png"])
def test_tour_pictures(name):
    """Each picture make_tour.py draws is a PNG shown by the README or a docs page."""
    data = (ROOT / "docs" / "img" / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"(docs/img/{name})" in README or any(f"(img/{name})" in t for n, t in PAGES.items() if n != "README.md")
