"""Configuration search: enumerate layouts, estimate each in closed form, simulate the candidates.

Layouts are enumerated as in the course notes' ``parallel_plan.py`` (TP within a node, CP, PP,
DP derived), for an MoE model with every valid EP and expert-TP degree and each token dispatcher,
crossed with the schedules, micro-batch sizes, ZeRO stages and recompute policies asked for
(:mod:`simtrain.layout_search.candidates`). The closed form ranks them and drops what does not fit; the
simulator then runs the candidates in parallel processes: all of them, or with a top K in the
closed form's order until the rest are proven slower than the K best simulated (each one's step
lower bound, :mod:`simtrain.workload.bound`, above the K-th best step). Every finished candidate is
appended to a results file as one JSON line, so an interrupted search resumes where it stopped:
a last line cut off mid-write (the process killed during the append) is truncated away and its
candidate runs again; any other line that is not such a row is a one-line error naming the line.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import closing
from pathlib import Path
from typing import Callable

import numpy as np

from simtrain.layout_search.candidates import (Candidate, analytic_estimate, check_expert_grid,  # noqa: F401 (re-exported)
                                 enumerate_candidates, estimate_candidates)
from simtrain.layout_search.candidates import label as _label
from simtrain.errors import SimtrainError, SpecError
from simtrain.layout_search.executors import run_unordered
from simtrain.settings import lookup
from simtrain.specs.model import load_model
from simtrain.specs.parallel import SEARCH_DEGREES


def simulate_candidate(candidate: Candidate) -> dict:
    """Simulate one candidate; returns its report (or the error that stopped it)."""
    from simtrain.api.resolve import resolve
    from simtrain.api.simulate import simulate

    try:
        result = simulate(resolve(candidate.as_dict(), strict=False))
    except SimtrainError as exc:
        return {"error": str(exc)}
    return {**result.report, "wall_s": result.wall_s}


#: The start of every row a search appends (``json.dumps(..., sort_keys=True)``: "key" sorts first).
ROW_START = b'{"key": "'


def check_results_path(path: Path, resume: bool) -> None:
    """One-line errors for a ``--results`` path the search could not append to, before any
    candidate runs: a folder, a missing or unwritable folder, a file that is not a regular file
    (with ``resume``, it is read) or not writable."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SpecError(f"--results {path}: is a folder; give a file path in it (such as {path / 'results.jsonl'})")
    if not folder.is_dir():
        raise SpecError(f"--results {path}: folder {folder} does not exist; create it or give a path in an "
                        f"existing folder")
    if path.exists():
        if not path.is_file():
            raise SpecError(f"--results {path}: not a regular file; give a .jsonl file path")
        if not os.access(path, os.R_OK | os.W_OK):
            raise SpecError(f"--results {path}: the file is not readable and writable; give a path you can write")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise SpecError(f"--results {path}: cannot create a file in {folder} (not writable); give a path in a "
                        f"writable folder")


def _row_problem(row: object) -> str | None:
    """What makes ``row`` something other than a row a search writes (None: it is one)."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    if not isinstance(row.get("key"), str):
        return "its \"key\" is missing or not a string"
    report = row.get("report")
    if not isinstance(report, dict):
        return "its \"report\" is missing or not an object"
    if isinstance(report.get("error"), str):
        return None
    for name in ("step_time_s", "mfu"):
        value = report.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            return f"its report's \"{name}\" is {json.dumps(value)[:40]}, not a finite number"
    if not isinstance(report.get("fits_in_memory", True), bool):
        return "its report's \"fits_in_memory\" is not true or false"
    if not isinstance(report.get("config", {}), dict):
        return "its report's \"config\" is not an object"
    return None


def _torn_label(line: bytes) -> str:
    """The candidate of a row cut off mid-write, as far as its key survived."""
    import re

    match = re.match(rb'\{"key": ("(?:[^"\\]|\\.)*")', line)
    try:
        return _label(Candidate.of(json.loads(json.loads(match.group(1))))) if match else "one whose key was cut off"
    except (ValueError, TypeError, KeyError, AttributeError):
        return "one whose key was cut off"


def load_results(path: Path, notice: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Finished candidates of an earlier run (one JSON object per line). A last line cut off
    mid-write (no newline at its end, or not parsing, and begun as a row) is truncated away and
    ``notice`` hears which candidate runs again (default: a line on stderr). Any other line that
    is not a row a search writes is a one-line error naming the file and the line."""
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    check_results_path(path, resume=True)
    data = path.read_bytes()
    complete = data.endswith(b"\n")
    lines = data.split(b"\n")[:-1] if complete else data.split(b"\n")
    offset = 0
    for number, line in enumerate(lines if data else [], 1):
        try:
            row = json.loads(line.decode("ascii"))
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, deep nesting
            row, problem = None, "not a JSON object (binary data, or not written by search)"
        else:
            problem = _row_problem(row)
        if number == len(lines) and line.startswith(ROW_START) and (not complete or row is None):
            _truncate(path, offset)
            say = notice or (lambda text: print(text, file=sys.stderr))
            say(f"simtrain: --results {path}: line {number} was cut off mid-write; dropped it, candidate "
                f"{_torn_label(line)} runs again")
            break
        if problem is not None:
            raise SpecError(f"--results {path}: line {number}: {problem}; valid: one JSON row per line as "
                            f"search appends them (start over without --resume)")
        done[row["key"]] = row
        offset += len(line) + 1
    return done


def _truncate(path: Path, size: int) -> None:
    try:
        with open(path, "r+b") as fh:
            fh.truncate(size)
    except OSError as exc:
        raise SpecError(f"--results {path}: cannot cut off its torn last line ({exc.strerror})") from None


def run_candidates(candidates: list[Candidate], *, jobs: int, results: Path | None, resume: bool,
                   progress: Callable[[int, int, str], None] | None = None, executor: str = "local",
                   scheduler: str | None = None, notice: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Simulate ``candidates`` over ``jobs`` processes, or on a dask cluster (``executor``,
    ``scheduler``: :mod:`simtrain.layout_search.executors`); append each to ``results`` as it finishes.
    ``notice`` hears of a torn last line dropped from ``results`` (:func:`load_results`)."""
    if results is not None:
        check_results_path(results, resume)
    done = load_results(results, notice) if (results is not None and resume) else {}
    if results is not None and not resume and results.exists():
        results.unlink()
    todo = [c for c in candidates if c.key not in done]
    total, finished = len(candidates), len(candidates) - len(todo)
    if progress:
        progress(finished, total, "resumed" if finished else "start")

    def record(c: Candidate, report: dict) -> None:
        nonlocal finished
        row = {"key": c.key, "report": report}
        done[c.key] = row
        finished += 1
        if results is not None:
            try:
                with open(results, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise SpecError(f"--results {results}: cannot append a finished candidate ({exc.strerror})") from None
        if progress:
            progress(finished, total, _label(c))

    with closing(run_unordered(simulate_candidate, todo, executor=executor, jobs=jobs,
                               scheduler=scheduler)) as finishing:  # closed early: workers stop at once
        for c, report in finishing:
            record(c, report)
    return done


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on average ranks, so ties are handled)."""
    if len(a) < 2:
        return None
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):  # average ranks of ties
        tie = x == value
        ranks[tie] = ranks[tie].mean()
    return ranks


def simulated_search(base: dict, *, gpus: int, gpus_per_node: int, top: int | None, jobs: int,
                     results: Path | None, resume: bool, progress=None, executor: str = "local",
                     scheduler: str | None = None, notice=None, **grid) -> dict:
    """Enumerate, estimate, simulate (where ``executor`` says) and rank. Returns a JSON-ready
    result; ``progress(done, total, label)`` hears of every stage: ``label`` "estimate" while
    the closed form ranks the layouts, then each finished candidate; ``notice`` hears of a torn
    last line dropped from ``results`` (:func:`load_results`).

    >>> out = simulated_search({"model": "llama3-8b", "topology": "seed-h100", "nodes": 1, "seq": 8192,
    ...                         "gbs": 64}, gpus=8, gpus_per_node=8, top=2, jobs=1, results=None, resume=False)
    >>> out["candidates_fit"], out["candidates_simulated"] + out["candidates_bounded"]
    (16, 16)
    >>> [r["simulated_rank"] for r in out["ranking"][:2]]
    [1, 2]
    """
    if results is not None:  # before any work: a bad path or row, and a torn last line repaired
        check_results_path(results, resume)
        if resume:
            load_results(results, notice)
    model = load_model(lookup(base, "model"))
    check_expert_grid(model, grid.get("eps"), grid.get("etps"), grid.get("dispatchers"),
                      grid.get("tps", SEARCH_DEGREES["tp"]))
    candidates = enumerate_candidates(base, gpus=gpus, gpus_per_node=gpus_per_node, model=model, **grid)
    if not candidates:
        raise SpecError(f"no layout to try: none of the degrees given makes a layout of {gpus} GPUs (TP at most "
                        f"the {gpus_per_node} GPUs of a node, tp*cp*pp dividing the GPUs"
                        + (", etp*ep*pp dividing them, ep the experts" if model.is_moe else "") + ")")
    estimated = [(c, est) for c, est in zip(candidates, estimate_candidates(candidates, jobs, progress))
                 if est is not None and est.get("fits_in_memory", True)]
    if not estimated:
        raise SpecError(f"no configuration fits: none of the {len(candidates)} layouts of {gpus} GPUs passes "
                        f"the closed-form memory ledger (try more GPUs, a longer --gbs, or --recompute full)")
    estimated.sort(key=lambda ce: ce[1]["step_time_s"])
    run = dict(jobs=jobs, results=results, executor=executor, scheduler=scheduler, notice=notice)
    if top:
        chosen, done, skipped = _proven_top(estimated, top, resume=resume, progress=progress, **run)
    else:
        chosen, skipped = estimated, 0
        done = run_candidates([c for c, _ in chosen], resume=resume, progress=progress, **run)
    rows = []
    position = {c.key: k for k, (c, _) in enumerate(estimated, 1)}  # the closed form's rank among all that fit
    for c, est in chosen:
        analytic_rank = position[c.key]
        rep = done[c.key]["report"]
        label = _label(c)
        chosen = rep.get("config", {}).get("recompute_layers")
        if chosen is not None:
            label = label.replace("rc=auto", f"rc=auto({chosen})")
        rows.append({"settings": c.as_dict(), "label": label, "ep": c.get("ep", 1),
                     "etp": c.get("etp", c.value("tp")), "moe_dispatcher": c.get("moe_dispatcher"),
                     "analytic_rank": analytic_rank,
                     "analytic_step_time_s": est["step_time_s"], "analytic_mfu": est["mfu"],
                     "simulated_step_time_s": rep.get("step_time_s"), "simulated_mfu": rep.get("mfu"),
                     "fits_in_memory": rep.get("fits_in_memory"), "peak_memory_gib": rep.get("peak_memory_gib"),
                     "error": rep.get("error")})
    ok = [r for r in rows if r["error"] is None]
    ok.sort(key=lambda r: (not r["fits_in_memory"], r["simulated_step_time_s"], r["analytic_rank"]))
    for i, r in enumerate(ok, 1):
        r["simulated_rank"] = i
    rho = spearman([r["analytic_step_time_s"] for r in ok], [r["simulated_step_time_s"] for r in ok])
    return {"candidates_enumerated": len(candidates), "candidates_fit": len(estimated),
            "candidates_simulated": len(rows), "candidates_bounded": skipped, "spearman": rho,
            "ranking": ok, "failed": [r for r in rows if r["error"] is not None]}


def _proven_top(estimated: list[tuple[Candidate, dict]], top: int, *, resume: bool, progress, **run
                ) -> tuple[list[tuple[Candidate, dict]], dict[str, dict], int]:
    """Simulate the candidates in the closed form's order, ``jobs`` at a time (so with more jobs a
    few more may run; the top ``top`` is the same), skipping
    one only where its step lower bound (:func:`simtrain.workload.bound.step_lower_bound`) exceeds
    the ``top``-th best simulated step of the candidates that fit: it can then neither enter the
    top ``top`` (a slower one ranks after them, one that does not fit after every one that
    fits). Returns the simulated candidates with their estimates, the finished rows and how many
    were skipped."""
    chosen: list[tuple[Candidate, dict]] = []
    done: dict[str, dict] = {}
    fitting: list[float] = []  # simulated step times of the candidates that fit
    skipped, wave, k = 0, max(1, run["jobs"]), 0
    while k < len(estimated):
        threshold = sorted(fitting)[top - 1] if len(fitting) >= top else None  # fixed within a round
        batch = []
        while k < len(estimated) and len(batch) < wave:
            c, est = estimated[k]
            k += 1
            if threshold is not None and _bound(c) > threshold:
                skipped += 1
            else:
                batch.append((c, est))
        if not batch:
            continue
        offset, total, first = len(chosen), len(chosen) + len(batch) + len(estimated) - k, not chosen

        def step(n: int, _total: int, label: str, offset: int = offset, total: int = total, first: bool = first):
            if progress is not None and (first or label not in ("start", "resumed")):  # one start per search
                progress(offset + n, total, label)

        done.update(run_candidates([c for c, _ in batch], resume=resume or not first, progress=step, **run))
        chosen += batch
        reports = [done[c.key]["report"] for c, _ in batch]
        fitting += [r["step_time_s"] for r in reports if r.get("error") is None and r.get("fits_in_memory", True)]
    return chosen, done, skipped


def _bound(candidate: Candidate) -> float:
    """The candidate's step lower bound; 0 (no skipping) where none is known or it does not resolve."""
    from simtrain.api.resolve import resolve
    from simtrain.workload.bound import step_lower_bound

    try:
        bound = step_lower_bound(resolve(candidate.as_dict(), strict=False))
    except SimtrainError:
        return 0.0
    return 0.0 if bound is None else bound
