"""Configuration search: enumerate layouts, estimate each in closed form, simulate the candidates.

Layouts are enumerated as in the course notes' ``parallel_plan.py`` (TP within a node, CP, PP,
DP derived), crossed with the schedules, micro-batch sizes, ZeRO stages and recompute policies
asked for. The closed form ranks them and drops what does not fit; the simulator then runs the
candidates (all, or the analytic top K) in parallel processes. Every finished candidate is
appended to a results file as one JSON line, so an interrupted search resumes where it stopped.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from simtrain.errors import SimtrainError, SpecError
from simtrain.executors import run_unordered
from simtrain.schedules import REGISTRY


@dataclass(frozen=True)
class Candidate:
    """One layout to evaluate: the settings of a ``simtrain run``."""

    settings: tuple[tuple[str, object], ...]

    @property
    def key(self) -> str:
        return json.dumps(dict(self.settings), sort_keys=True)

    def as_dict(self) -> dict:
        return dict(self.settings)


def enumerate_candidates(base: dict, *, gpus: int, gpus_per_node: int, schedules=("1f1b",), vpps=(1,),
                         mbss=(1,), zeros=(1,), recomputes=("auto",), tps=(1, 2, 4, 8),
                         cps=(1, 2, 4, 8, 16, 32), pps=(1, 2, 4, 8, 16)) -> list[Candidate]:
    """Every combination, in a fixed order (TP, CP, PP, schedule, vpp, mbs, ZeRO, recompute)."""
    out = []
    for tp, cp, pp, sched, vpp, mbs, zero, rc in itertools.product(tps, cps, pps, schedules, vpps, mbss,
                                                                   zeros, recomputes):
        if tp > gpus_per_node or gpus % (tp * cp * pp):
            continue
        if vpp > 1 and (pp == 1 or not REGISTRY.record(sched).takes("vpp")):
            continue
        settings = {**base, "gpus": gpus, "tp": tp, "cp": cp, "pp": pp, "dp": gpus // (tp * cp * pp),
                    "schedule": sched, "vpp": vpp, "mbs": mbs, "zero": zero, "recompute": rc}
        out.append(Candidate(tuple(sorted(settings.items()))))
    return out


def analytic_estimate(candidate: Candidate) -> dict | None:
    """The closed-form estimate of a candidate, or None when it is invalid or does not fit. A
    schedule without a closed form is estimated with the one its record ranks it as (zb-auto:
    1F1B, an upper bound of its makespan)."""
    from simtrain import api
    from simtrain.analytic.model import estimate

    try:
        sc = api.resolve(candidate.as_dict())
    except SimtrainError:
        return None
    sched = REGISTRY.ranking_schedule(sc.parallel.schedule)
    try:
        return estimate(sc.model, sc.cluster, sc.parallel, gpu=sc.gpu, schedule=sched)
    except SimtrainError:
        return None


def simulate_candidate(candidate: Candidate) -> dict:
    """Simulate one candidate; returns its report (or the error that stopped it)."""
    from simtrain import api

    try:
        result = api.simulate(api.resolve(candidate.as_dict()))
    except SimtrainError as exc:
        return {"error": str(exc)}
    return {**result.report, "wall_s": result.wall_s}


def load_results(path: Path) -> dict[str, dict]:
    """Finished candidates of an earlier run (one JSON object per line; a torn last line is skipped)."""
    done = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "key" in row:
            done[row["key"]] = row
    return done


def run_candidates(candidates: list[Candidate], *, jobs: int, results: Path | None, resume: bool,
                   progress: Callable[[int, int, str], None] | None = None, executor: str = "local",
                   scheduler: str | None = None) -> dict[str, dict]:
    """Simulate ``candidates`` over ``jobs`` processes, or on a dask cluster (``executor``,
    ``scheduler``: :mod:`simtrain.executors`); append each to ``results`` as it finishes."""
    done = load_results(results) if (results is not None and resume) else {}
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
            with open(results, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        if progress:
            progress(finished, total, _label(c.as_dict()))

    for c, report in run_unordered(simulate_candidate, todo, executor=executor, jobs=jobs, scheduler=scheduler):
        record(c, report)
    return done


def _label(s: dict) -> str:
    extra = f" v{s['vpp']}" if s.get("vpp", 1) > 1 else ""
    return (f"TP={s['tp']} CP={s['cp']} PP={s['pp']} DP={s['dp']} {s['schedule']}{extra} mbs={s['mbs']} "
            f"ZeRO-{s['zero']} rc={s['recompute']}")


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
                     scheduler: str | None = None, **grid) -> dict:
    """Enumerate, estimate, simulate (where ``executor`` says) and rank. Returns a JSON-ready
    result; ``progress(done, total, label)`` hears of every stage: ``label`` "estimate" while
    the closed form ranks the layouts, then each finished candidate.

    >>> out = simulated_search({"model": "llama3-8b", "topology": "seed-h100", "nodes": 1, "seq": 8192,
    ...                         "gbs": 64}, gpus=8, gpus_per_node=8, top=2, jobs=1, results=None, resume=False)
    >>> out["candidates_fit"], [r["analytic_rank"] for r in sorted(out["ranking"], key=lambda r: r["analytic_rank"])]
    (16, [1, 2])
    """
    candidates = enumerate_candidates(base, gpus=gpus, gpus_per_node=gpus_per_node, **grid)
    estimated = []
    for i, c in enumerate(candidates):
        if progress:
            progress(i, len(candidates), "estimate")
        est = analytic_estimate(c)
        if est is not None and est.get("fits_in_memory", True):
            estimated.append((c, est))
    if not estimated:
        raise SpecError(f"no configuration fits: none of the {len(candidates)} layouts of {gpus} GPUs passes "
                        f"the closed-form memory ledger (try more GPUs, a longer --gbs, or --recompute full)")
    estimated.sort(key=lambda ce: ce[1]["step_time_s"])
    chosen = estimated[:top] if top else estimated
    done = run_candidates([c for c, _ in chosen], jobs=jobs, results=results, resume=resume, progress=progress,
                          executor=executor, scheduler=scheduler)
    rows = []
    for analytic_rank, (c, est) in enumerate(chosen, 1):
        rep = done[c.key]["report"]
        label = _label(c.as_dict())
        chosen = rep.get("config", {}).get("recompute_layers")
        if chosen is not None:
            label = label.replace("rc=auto", f"rc=auto({chosen})")
        rows.append({"settings": c.as_dict(), "label": label, "analytic_rank": analytic_rank,
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
            "candidates_simulated": len(rows), "spearman": rho,
            "ranking": ok, "failed": [r for r in rows if r["error"] is not None]}
