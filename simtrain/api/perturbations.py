"""A scenario's perturbations: parsed from their settings, applied to the cluster and the
lowering, and summarised for the report.

The settings (``--straggler``, ``--throttle``, ``--slow-node``, ``--node-gpu``,
``--degrade-link``, ``--fail-link``, ``--seed``) become one
:class:`~simtrain.specs.perturbation.Perturbations`. The report's ``perturbations`` section says
which GPUs and links they touch and what each cost: the step time with all of them, without any,
and with each setting alone (so the costs of two perturbations need not add up: a second straggler
in the same TP group costs nothing more).
"""

from __future__ import annotations

from typing import Any, Callable

from simtrain.specs import perturbation as pt
from simtrain.specs.gpu import GPU_PRESETS, GpuSpec, get_gpu
from simtrain.specs.perturbation import Perturbations
from simtrain.topology.cluster import Cluster

#: The settings that perturb a cluster, in the order the report lists them.
KEYS = tuple(pt.SETTING_FIELDS)


def from_texts(*, straggler: str | None = None, throttle: str | None = None, slow_node: str | None = None,
               node_gpu: str | None = None, degrade_link: str | None = None, fail_link: str | None = None,
               seed: int = 0) -> Perturbations:
    """The perturbations these settings give (one-line errors for malformed values)."""
    fraction, factor = pt.parse_throttle(throttle)
    texts = dict(straggler=straggler, throttle=throttle, slow_node=slow_node, node_gpu=node_gpu,
                 degrade_link=degrade_link, fail_link=fail_link)
    return Perturbations(stragglers=pt.parse_indexed("--straggler", straggler, "GPU rank"),
                         throttle_fraction=fraction, throttle_factor=factor,
                         slow_nodes=pt.parse_indexed("--slow-node", slow_node, "node"),
                         node_gpus=pt.parse_node_gpus(node_gpu, sorted(GPU_PRESETS)),
                         degraded_links=pt.parse_degraded(degrade_link),
                         failed_links=pt.parse_failed(fail_link), seed=seed,
                         given=tuple(k for k in KEYS if texts[k]))


def workload_fields(p: Perturbations, cluster: Cluster, gpu: GpuSpec, gpus: int) -> dict[str, Any]:
    """The :class:`~simtrain.workload.options.WorkloadOptions` fields that slow GPUs or give them
    another generation's kernel times (with the run's flat ``efficiency``, where it sets one)."""
    speeds = p.speeds(gpus, cluster.gpus_per_node)
    others: dict[str, GpuSpec] = {}
    for name in {n for _, _, n in p.node_gpus}:
        other = get_gpu(name)
        others[name] = other.with_efficiency(gpu.efficiency) if gpu.efficiency is not None else other
    presets = p.gpu_presets(gpus, cluster.gpus_per_node)
    return dict(speeds=tuple(sorted(speeds.items())),
                gpus=tuple(sorted((g, others[n]) for g, n in presets.items() if others[n] != gpu)))


def touched(p: Perturbations, gpus: int, gpus_per_node: int) -> dict[str, Any]:
    """The GPUs and links the perturbations touch (JSON-ready)."""
    return {
        "gpus_slowed": {str(g): f for g, f in sorted(p.speeds(gpus, gpus_per_node).items())},
        "gpus_of_another_generation": {str(g): n for g, n in sorted(p.gpu_presets(gpus, gpus_per_node).items())},
        "links_degraded": {f"{a}-{b}": f for a, b, f in p.degraded_links},
        "links_failed": [f"{a}-{b}" for a, b in p.failed_links],
    }


def rank_marks(p: Perturbations, opts: Any) -> dict[int, str]:
    """Words added to a perturbed rank's label in the Gantt chart and the trace: its speed
    factor and its GPU where another generation's (``opts``: the lowering's options)."""
    if not p.any:
        return {}
    out: dict[int, str] = {}
    for gpu, factor in opts.speeds:
        out[gpu] = f" [slowed x{factor:g}]"
    for gpu, spec in opts.gpus:
        out[gpu] = out.get(gpu, "") + f" [{spec.name}]"
    return out


def cost_report(p: Perturbations, step_s: float, gpus: int, gpus_per_node: int,
                step_with: Callable[[Perturbations], float]) -> dict[str, Any]:
    """The report's ``perturbations`` section of ``p``: what they touch, the step time without
    any (``step_with`` a scenario's step time with the perturbations it is given) and the cost
    of each setting given, alone; empty without perturbations."""
    if not p.any:
        return {}
    given = p.settings_given()
    baseline = step_with(Perturbations(seed=p.seed))
    alone = {k: (step_s if len(given) == 1 else step_with(p.only(k))) - baseline for k in given}
    return {**touched(p, gpus, gpus_per_node), "baseline_step_s": baseline, "cost_s": step_s - baseline,
            "cost_by_setting_s": alone}


def check_reachable(program: Any, router: Any, failed: tuple[tuple[str, str], ...]) -> None:
    """With failed links, every group of ``program`` must still be connected: otherwise a
    one-line error naming the failed links, the group's kind and its GPUs."""
    if not failed:
        return
    from simtrain.errors import SpecError
    from simtrain.workload.program import KINDS

    kinds: dict[int, str] = {}
    for gs, kind in zip(program.ops.group_set, program.ops.kind):
        if gs >= 0 and gs not in kinds:
            kinds[gs] = KINDS[kind]
    links = ",".join(f"{a}-{b}" for a, b in failed)
    for gid, groups in enumerate(program.group_sets):
        for group in groups:
            for other in group[1:]:
                for a, b in ((group[0], other), (other, group[0])):
                    try:
                        router.route(a, b)
                    except SpecError:
                        shown = ", ".join(map(str, group[:16])) + (", ..." if len(group) > 16 else "")
                        raise SpecError(f"--fail-link {links}: disconnects the {kinds.get(gid, 'dp')} group of "
                                        f"GPUs ({shown}): gpu {a} has no route to gpu {b}") from None
