"""Options of the workload lowering: what a step's programs include and how ranks are folded."""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.costs.calibration import Calibration
from simtrain.specs.gpu import GpuSpec
from simtrain.workload.moe_routing import Routing


@dataclass(frozen=True)
class WorkloadOptions:
    """What :func:`simtrain.workload.lower.lower` puts into the programs of one step."""

    fold: bool = True  # simulate one representative rank per pipeline rank
    dp_bucket_params: int | None = None  # gradient bucket size; None = Megatron's max(40M, 1M * dp * cp)
    embedding: bool = True  # embedding on the first chunk
    lm_head: bool = True  # LM head and loss on the last chunk
    optimizer: bool = True  # optimizer step at the end of the step
    steps: int = 1  # consecutive training steps, each ending in the optimizer step
    optimizer_sync: str = "grad-norm"  # grad-norm: global norm all-reduce first; post-validation: none
    dp_comm: bool = True  # data-parallel gradient reduction and parameter gather
    tp_comm: bool = True  # tensor-parallel collectives
    routing: Routing = Routing()  # MoE token routing (uniform unless skewed)
    calibration: Calibration | None = None  # measured kernel times replacing the model where given
    speeds: tuple[tuple[int, float], ...] = ()  # (GPU, speed factor) of slowed GPUs (perturbations)
    gpus: tuple[tuple[int, GpuSpec], ...] = ()  # (GPU, its GPU) where a node holds another generation

    @property
    def touched(self) -> dict[int, tuple[float, str | None]]:
        """The GPUs that compute differently from the cluster's GPU: their speed factor and other
        GPU's name."""
        speeds, gpus = dict(self.speeds), {g: spec.name for g, spec in self.gpus}
        return {g: (speeds.get(g, 1.0), gpus.get(g)) for g in sorted(set(speeds) | set(gpus))}
