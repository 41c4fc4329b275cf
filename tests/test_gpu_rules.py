"""GPU-COUNT's reconciliation of physical GPUs with what the NVIDIA device plugin advertises, on the
configurations NVIDIA documents: plain GPUs, time-slicing replicas, and MIG under the single and mixed
strategies (NVIDIA GPU Operator docs, "Time-Slicing GPUs in Kubernetes" and "GPU Operator with MIG";
labels as GPU Feature Discovery writes them)."""

from __future__ import annotations

from conformance.checks.gpu_rules import reconcile_advertised
from conformance.facts.gpu import Gpu


def gpus(n: int, mig: int = 0) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-{i}", bus_id=f"0000:{i:02x}:00.0", mig=i < mig) for i in range(n)]


def test_plain_gpus_match_their_capacity():
    assert reconcile_advertised(gpus(8), 8, {"nvidia.com/gpu": 8}, {})[0] is None
    problem, _ = reconcile_advertised(gpus(7), 8, {"nvidia.com/gpu": 8}, {})
    assert problem == "7 GPU(s) visible to NVML x 1 replica(s) = 7, the node advertises nvidia.com/gpu 8"


def test_time_slicing_replicas_multiply_the_count():
    # the documented example: replicas 4, each GPU advertised four times, labels set by GFD
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    assert reconcile_advertised(gpus(8), 32, {}, labels)[0] is None
    assert "x 4 replica(s) = 32, the node advertises nvidia.com/gpu 28" in reconcile_advertised(gpus(8), 28, {}, labels)[0]


def test_a_multiple_without_the_replicas_label_is_not_compared():
    problem, lines = reconcile_advertised(gpus(8), 32, {}, {})
    assert problem is None and "not compared: nvidia.com/gpu 32 is 4 x the 8 GPU(s)" in lines[-1]


def test_single_strategy_counts_mig_devices():
    problem, lines = reconcile_advertised(gpus(8, mig=8), 56, {}, {"nvidia.com/mig.strategy": "single"})
    assert problem is None and "counts MIG devices, not GPUs" in lines[-1]


def test_mixed_strategy_counts_whole_gpus_and_slices_apart():
    labels = {"nvidia.com/mig.strategy": "mixed"}
    slices = {"nvidia.com/gpu": 6, "nvidia.com/mig-1g.10gb": 14}
    assert reconcile_advertised(gpus(8, mig=2), 6, slices, labels)[0] is None
    assert "expected 6 (GPUs without MIG x replicas)" in reconcile_advertised(gpus(8, mig=2), 8, slices, labels)[0]
    # all GPUs in MIG mode: nvidia.com/gpu 0 is right, and slices must be there
    assert reconcile_advertised(gpus(8, mig=8), 0, {"nvidia.com/mig-1g.10gb": 56}, labels)[0] is None
    assert "advertises no nvidia.com/mig-*" in reconcile_advertised(gpus(8, mig=8), 0, {}, labels)[0]


def test_mig_without_a_strategy_label_is_not_compared():
    problem, lines = reconcile_advertised(gpus(2, mig=1), 1, {}, {})
    assert problem is None and "no nvidia.com/mig.strategy label" in lines[-1]
