"""Regenerate the generated parts of README.md and docs/*.md (run from the repository root).

    python docs/make_tour.py          # writes docs/img/*.png and updates the pages between markers
    python docs/make_tour.py --text   # updates the pages only
    python docs/make_tour.py --help   # prints this text

Every block between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` comes from here, never by
hand: the tour's outputs (from the simulator), the settings reference (from
:data:`simtrain.settings.SETTINGS` and ``OUTPUTS``), the CLI reference (from the parser), the report keys (from
the ``#:`` comments of the report types' fields) and the module map (from the package tree, each
module's path and the first sentence of its docstring). Each block lives in one page: the tour's in
README.md, the others in the docs page of their subject (:func:`holder` finds it).
tests/test_docs.py checks that every block equals what this script produces.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simtrain"
#: The page that holds the module map; its links are relative to it.
MODULE_MAP_PAGE = ROOT / "docs" / "modules.md"

TOUR_RUN = ["run", "--out", "{out}", "--no-plot"]
TOUR_COMPARE = ["compare", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", "64", "--tp", "8",
                "--pp", "4", "--seq", "8192", "--gbs", "32"]
TOUR_SCHEDULE = ["schedule", "zb-h1", "--pp", "4", "--microbatches", "8"]
TOUR_LIST = ["list", "gpus"]

#: The module map's order: the data flow of the design guide, by first name under simtrain/
#: (a module or a subpackage). Names not listed follow, alphabetically.
FLOW = ("__init__", "units", "errors", "budget", "specs", "presets", "topology", "schedules", "costs", "workload",
        "network", "engine", "timeline", "results", "finite", "analytic", "outputs", "settings",
        "scenario", "api", "layout_search", "importers", "cli", "__main__")
#: Longest summary shown; a longer first sentence is cut to the docstring's first line.
SUMMARY_CHARS = 200


def cli_text(argv: list[str]) -> str:
    from simtrain.cli.main import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"simtrain {' '.join(argv)} failed with {code}")
    return buf.getvalue().rstrip()


def fenced(text: str) -> str:
    """A block body shown as plain text."""
    return f"```text\n{text}\n```\n"


def tour_blocks(tmp: Path) -> dict[str, str]:
    """The tour's blocks, keyed by marker name (they run the simulator)."""
    run = cli_text([a.format(out=tmp) for a in TOUR_RUN])
    run = "\n".join(line for line in run.splitlines() if not line.startswith("wrote ")).rstrip()
    return {
        "tour-run": fenced("$ simtrain run\n" + run),
        "tour-compare": fenced("$ simtrain " + " ".join(TOUR_COMPARE) + "\n" + cli_text(TOUR_COMPARE)),
        "tour-schedule": fenced("$ simtrain " + " ".join(TOUR_SCHEDULE) + "\n" + cli_text(TOUR_SCHEDULE)),
        "tour-list": fenced("$ simtrain " + " ".join(TOUR_LIST) + "\n" + cli_text(TOUR_LIST)),
        "nccl-tests": nccl_tests_table(),
    }


def nccl_tests_table() -> str:
    """Published nccl-tests results against the network model (tests/validation/nccl_tests.csv)."""
    from simtrain.network.nccl_tests import load_measurements, markdown

    return markdown(load_measurements(ROOT / "tests" / "validation" / "nccl_tests.csv")) + "\n"


def reference_blocks() -> dict[str, str]:
    """The reference blocks, keyed by marker name (they read the code only)."""
    return {"settings": settings_table(), "cli-reference": fenced(cli_reference()),
            "report-keys": report_keys(), "module-map": module_map()}


# ---- report keys --------------------------------------------------------------------------------

def field_docs(cls: type) -> list[tuple[list[str], str]]:
    """The fields a class declares itself, grouped under the ``#:`` comment lines above the first
    of each group: [(field names, comment)]."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    groups: list[tuple[list[str], str]] = []
    for node in ast.parse(source).body[0].body:
        if not isinstance(node, ast.AnnAssign):
            continue
        doc, i = [], node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            doc.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        if doc:
            groups.append(([node.target.id], " ".join(doc)))
        elif groups:
            groups[-1][0].append(node.target.id)
        else:
            raise SystemExit(f"{cls.__name__}.{node.target.id} has no #: comment")
    return groups


def report_keys() -> str:
    """The report keys from the report types' field comments: the step metrics both the simulation
    and the closed form give, then what only each of them adds."""
    from simtrain.analytic.model import AnalyticReport
    from simtrain.results.metrics import Report, StepMetrics

    out = []
    for title, cls in (("Step metrics (`report.json` and `simtrain analytic`)", StepMetrics),
                       ("The simulated run (`report.json`)", Report),
                       ("The closed form (`simtrain analytic`, beside the step metrics)", AnalyticReport)):
        out.append(f"{title}:\n")
        out += [f"- {', '.join(f'`{n}`' for n in names)}: {doc}" for names, doc in field_docs(cls)]
        out.append("")
    return "\n".join(out)


# ---- settings and CLI reference ---------------------------------------------------------------

def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def settings_table() -> str:
    """A markdown table of every run setting, then every output setting: TOML key, flags, valid
    values, default, meaning."""
    from simtrain.settings import OUTPUTS, SETTINGS

    kinds = {int: "integer", float: "number", str: "text", bool: "true or false"}
    rows = ["| key | flags | value | default | what it sets |", "|---|---|---|---|---|"]
    for s in (*SETTINGS.values(), *OUTPUTS.values()):
        flags = [f"`{f}`" for f in s.cli_flags] + ([f"`{s.off_flag}` (false)"] if s.off_flag else [])
        kind = " or ".join(kinds[k] for k in (s.kind if isinstance(s.kind, tuple) else (s.kind,)))
        value = (f"one of {', '.join(s.choices)}" if s.choices else kind
                 + (f", {s.rule.phrase}" if s.rule else ""))
        if s.default is None:
            default = s.default_text
        elif isinstance(s.default, bool):
            default = f"`{str(s.default).lower()}`"
        elif isinstance(s.default, str):
            default = f'`"{s.default}"`'
        else:
            default = f"`{s.default:_}`"  # TOML reads 50_000_000
        rows.append("| " + " | ".join(_cell(c) for c in (f"`{s.name}`", ", ".join(flags), value, default, s.help))
                    + " |")
    return "\n".join(rows) + "\n"


def _option_lines(p) -> list[tuple[str, str]]:
    """(flag with its value, help) of every argument of a subcommand."""
    import argparse

    out = []
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            flag = ", ".join(action.option_strings)
            if action.nargs != 0:
                flag += f" {action.metavar or action.dest.upper()}"
        else:
            flag = "|".join(action.choices) if action.choices else (action.metavar or action.dest)
        text = action.help or ""
        if action.required:
            text = (text + " (required)").strip()
        out.append((flag, text))
    return out


def cli_reference() -> str:
    """Every subcommand with its arguments, from the parser itself; a command with the flags of
    ``simtrain run`` lists only those it words differently."""
    import argparse

    from simtrain.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    options = {name: _option_lines(p) for name, p in sub.choices.items()}
    width = min(36, max(len(flag) for lines in options.values() for flag, _ in lines) + 2)
    run = options["run"]
    lines = []
    for name, p in sub.choices.items():
        lines.append(f"simtrain {name}: {helps.get(name, '')}")
        own = options[name]
        if name != "run" and [f for f, _ in own] == [f for f, _ in run]:
            own = [line for line in own if line not in run]
            lines.append("  the flags of simtrain run" + (", with:" if own else ""))
        for flag, text in own:
            gap = " " * max(width - len(flag), 2)
            lines.append(f"  {flag}{gap}{text}".rstrip())
        lines.append("")
    return "\n".join(lines).rstrip()


# ---- module map ---------------------------------------------------------------------------------

def summary(doc: str) -> str:
    """The docstring's first line, continued to the end of its sentence when it wraps (up to
    :data:`SUMMARY_CHARS`); reST literals and roles become markdown code."""
    if not doc:
        return ""
    para = " ".join(doc.split("\n\n")[0].split())
    first = " ".join(doc.splitlines()[0].split())
    end = re.compile(r"\.(?=\s|$)").search(para, max(len(first) - 1, 0))
    text = para[: end.end()] if end else para
    if len(text) > SUMMARY_CHARS:
        text = first.rstrip(",;:") + " ..."
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _flow_key(path: Path) -> tuple[int, str]:
    head = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    return (FLOW.index(head) if head in FLOW else len(FLOW), str(path.relative_to(PACKAGE)))


def module_map() -> str:
    """A markdown list of the package's modules in data-flow order (:data:`FLOW`): each path, as a
    link, and the summary of its docstring; a subpackage's modules are nested under it."""
    lines = []
    for path in sorted(PACKAGE.rglob("*.py"), key=_flow_key):
        rel = path.relative_to(ROOT).as_posix()
        depth = len(path.relative_to(PACKAGE).parts) - 1
        doc = summary(_docstring(path))
        if path.name == "__init__.py":
            if depth == 0:
                continue  # the package itself: the map's title says it
            shown, depth = rel.removesuffix("__init__.py"), depth - 1
        else:
            shown = rel
        link = Path(os.path.relpath(path, MODULE_MAP_PAGE.parent)).as_posix()
        lines.append(f"{'  ' * depth}- [`{shown}`]({link})" + (f": {doc}" if doc else ""))
    return "\n".join(lines) + "\n"


# ---- pages ----------------------------------------------------------------------------------------

def pages() -> list[Path]:
    """The pages that may hold generated blocks: README.md, then docs/*.md by name."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def block_pattern(name: str) -> re.Pattern:
    """A generated block: the start marker (group 1), its body (group 2), the end marker (group 3)."""
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)


def holder(name: str, texts: dict[Path, str]) -> Path:
    """The one page of ``texts`` (page -> text) that holds block ``name``."""
    found = [page for page, text in texts.items() if block_pattern(name).search(text)]
    if len(found) != 1:
        where = ", ".join(p.relative_to(ROOT).as_posix() for p in found) or "no page"
        raise SystemExit(f"block {name} must be in exactly one page, found in {where}")
    return found[0]


def replace_block(text: str, name: str, body: str) -> str:
    pattern = block_pattern(name)
    if not pattern.search(text):
        raise SystemExit(f"no block {name}")
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text)


def pictures() -> None:
    """docs/img/timeline.png (the default scenario), docs/img/dualpipev-pair.png (one overlapped
    pair) and docs/img/zb-h1.png (a textbook chart)."""
    from simtrain import api
    from simtrain.outputs.gantt import draw_gantt
    from simtrain.schedules import generate
    from simtrain.workload.fixed_cost import run_schedule

    img = ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    result = api.simulate(api.resolve(None))
    with tempfile.TemporaryDirectory() as tmp:  # the run's other outputs (and its folder lock) go with it
        api.write_outputs(result, tmp)
        (img / "timeline.png").write_bytes((Path(tmp) / "timeline.png").read_bytes())
    pair = api.simulate(api.resolve(PAIR_SCENARIO))
    rank = pair.timeline.ranks[0]
    draw_gantt(pair.timeline, img / "dualpipev-pair.png", ranks=[rank], streams=["compute", "ep", "pp_send"],
               window=pair_window(pair.timeline, rank), rank_labels=pair.rank_labels,
               title="dualpipev: one overlapped F&B pair (Mixtral 8x7B, EP 8 over two nodes, DeepEP, FP8)")
    run = run_schedule(generate("zb-h1", 4, 8))
    draw_gantt(run.timeline, img / "zb-h1.png", textbook=True, title="zb-h1: p=4, m=8, F=I=W=1",
               rank_labels={r: f"rank {r}" for r in range(4)}, time_label="time (units of F)")


#: The overlapped-pair picture: Mixtral with EP 8 across two nodes under DualPipeV.
PAIR_SCENARIO = dict(model="mixtral-8x7b", topology="h100-ib", gpus=64, tp=1, pp=2, ep=8, seq=2048, gbs=256,
                     schedule="dualpipev", order="tp-cp-dp-ep-pp", moe_dispatcher="deepep", fp8=True)


def pair_window(timeline, rank: int):
    """The time window of the first overlapped F&B pair in the second half of ``rank``'s step:
    from a forward compute span followed by a backward one of another micro-batch, as long as
    the spans belong to those two micro-batches."""
    from simtrain.outputs.view import Window

    spans = sorted(timeline.spans(timeline.mask(rank=rank, stream="compute")), key=lambda s: s.start_s)
    half = spans[-1].end_s / 2
    for i, (a, b) in enumerate(zip(spans, spans[1:])):
        if a.start_s >= half and a.kind == "F" and b.kind == "B" and a.mb != b.mb:
            j = i
            while j + 1 < len(spans) and spans[j + 1].mb in (a.mb, b.mb):
                j += 1
            return Window("s", a.start_s, spans[j].end_s, f"{a.start_s}:{spans[j].end_s}")
    raise SystemExit("no overlapped pair found")


def main(argv: list[str]) -> None:
    import tempfile

    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return
    unknown = [a for a in argv if a != "--text"]
    if unknown:
        raise SystemExit(f"make_tour.py: unknown arguments {' '.join(unknown)} (see --help)")
    texts = {page: page.read_text(encoding="utf-8") for page in pages()}
    with tempfile.TemporaryDirectory() as tmp:
        blocks = {**tour_blocks(Path(tmp)), **reference_blocks()}
    if "--text" not in argv:
        pictures()
    changed = {}
    for name, body in blocks.items():
        page = holder(name, texts)
        texts[page] = changed[page] = replace_block(texts[page], name, body)
    for page, text in changed.items():
        page.write_text(text, encoding="utf-8")
    shown = ", ".join(sorted(p.relative_to(ROOT).as_posix() for p in changed))
    print(f"updated {shown}" + ("" if "--text" in argv else " and docs/img/"), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
