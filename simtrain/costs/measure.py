"""Measuring the kernels of a layout on the local GPU, to write a calibration table.

:func:`layout_kernels` lists the distinct kernels one step of a layout runs (every block and pass
of the cost model, per micro-batch); :func:`~simtrain.costs.calibration.measured` times each with
a timer. :class:`TorchTimer` is the product's timer: PyTorch on the local GPU (the ``calibrate``
extra, ``pip install 'simtrain[calibrate]'``), CUDA events around ``repeat`` runs after
``warmup`` runs; any other callable ``kernel -> seconds`` can stand in for it (tests pass a stub).

What each kernel runs: a GEMM ``batch`` products ``[m, k] @ [k, n]`` in bf16 (``torch.bmm``;
FP8 through ``torch._scaled_mm``); a fused attention forward ``scaled_dot_product_attention``
over ``batch`` heads, its backward the difference between forward-and-backward and forward;
an elementwise kernel a copy moving its bytes (read half, write half).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simtrain import costs
from simtrain.costs.kernels import Attention, Gemm, Kernel
from simtrain.costs.shape import Shape
from simtrain.errors import SimtrainError
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec

INSTALL_HINT = "simtrain calibrate measures with PyTorch: pip install 'simtrain[calibrate]'"


def layout_kernels(model: ModelSpec, par: ParallelSpec) -> list[Kernel]:
    """The distinct kernels of one step of ``par`` on one rank, in first-seen order: the
    attention and MLP (or MoE) blocks of each kind of layer, the embedding and the LM head, in
    every pass, with the recompute policy's extra core forward (context-parallel ring steps in
    place of the whole core)."""
    sh = Shape.of(par)
    selective = par.recompute == "selective"
    found: dict[Kernel, None] = {}
    for kind in ("F", "I", "W"):
        parts = [costs.embedding_cost(model, sh, kind), costs.lm_head_cost(model, sh, kind)]
        head, core, tail = costs.attention_parts(model, sh, kind, selective)
        parts += [head, tail, costs.cp_step_core(model, sh, kind, selective) if par.cp > 1 else core]
        kinds = {model.is_moe_layer(i) for i in range(model.layers)}
        if False in kinds:
            parts.append(costs.mlp_cost(model, sh, kind))
        if True in kinds:
            parts.append(costs.moe_cost(model, sh, kind, par.expert_tp, par.ep, dispatcher=par.moe_dispatcher))
        for part in parts:
            found.update(dict.fromkeys(part.kernels))
    return list(found)


class TorchTimer:
    """Times kernels with PyTorch on ``device`` (CUDA events on a GPU)."""

    def __init__(self, device: str = "cuda", warmup: int = 3, repeat: int = 10):
        try:
            import torch
        except ImportError:
            raise SimtrainError(INSTALL_HINT) from None
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise SimtrainError("simtrain calibrate: PyTorch sees no CUDA GPU on this machine")
        self.torch, self.device, self.warmup, self.repeat = torch, device, warmup, repeat

    def __call__(self, kernel: Kernel) -> float:
        run = self._runner(kernel)
        if isinstance(kernel, Attention) and kernel.backward:
            forward = self._runner(Attention(kernel.name, kernel.batch, kernel.sq, kernel.skv, kernel.d_qk,
                                             kernel.d_v, kernel.causal, backward=False))
            return max(self._time(run) - self._time(forward), 1e-9)  # forward and backward, less the forward
        return self._time(run)

    def _time(self, run: Callable[[], Any]) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            run()
        if self.device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.repeat):
                run()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / self.repeat
        import time

        t0 = time.perf_counter()
        for _ in range(self.repeat):
            run()
        return (time.perf_counter() - t0) / self.repeat

    def _runner(self, kernel: Kernel) -> Callable[[], Any]:
        torch, dev = self.torch, self.device
        bf16 = torch.bfloat16
        if isinstance(kernel, Gemm):
            a = torch.randn(kernel.batch, kernel.m, kernel.k, device=dev, dtype=bf16)
            b = torch.randn(kernel.batch, kernel.k, kernel.n, device=dev, dtype=bf16)
            if kernel.dtype == "fp8":
                fp8 = torch.float8_e4m3fn
                a8, b8 = a[0].to(fp8), b[0].t().contiguous().t().to(fp8)
                one = torch.ones((), device=dev)
                return lambda: [torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=bf16)
                                for _ in range(kernel.batch)]
            return lambda: torch.bmm(a, b)
        if isinstance(kernel, Attention):
            import torch.nn.functional as F

            q = torch.randn(1, kernel.batch, kernel.sq, kernel.d_qk, device=dev, dtype=bf16, requires_grad=True)
            k = torch.randn(1, kernel.batch, kernel.skv, kernel.d_qk, device=dev, dtype=bf16, requires_grad=True)
            v = torch.randn(1, kernel.batch, kernel.skv, kernel.d_v, device=dev, dtype=bf16, requires_grad=True)
            if not kernel.backward:
                return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=kernel.causal)
            grad = torch.randn(1, kernel.batch, kernel.sq, kernel.d_v, device=dev, dtype=bf16)
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=kernel.causal).backward(grad)
        n = max(1, int(kernel.bytes // 4))  # bf16 elements: 2 bytes read and 2 written each
        src, dst = torch.empty(n, device=dev, dtype=bf16), torch.empty(n, device=dev, dtype=bf16)
        return lambda: dst.copy_(src)
