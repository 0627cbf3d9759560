"""The trace family: each name resamples the default trace towards its kind, by
the measure the name gives."""

from __future__ import annotations

import random

import pytest

from gpudock.scheduler.family import constraint_choices, gpu_milli, parse_name, resample


def default_like(count: int = 2000, seed: int = 3) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        num, milli = rng.choice(
            [(1, 1000)] * 6 + [(1, 470)] * 3 + [(1, 810)] * 2 + [(2, 1000), (8, 1000), (0, 0)] * 1
        )
        if rng.random() < 0.13:
            num, milli = 0, 0
        rows.append(
            {
                "name": f"pod-{i:04d}",
                "cpu_milli": str(rng.choice([4000, 8000, 12000])),
                "memory_mib": "8192",
                "num_gpu": str(num),
                "gpu_milli": str(milli),
                "gpu_spec": "",
            }
        )
    return rows


def share_part(rows: list[dict[str, str]]) -> float:
    total = sum(gpu_milli(r) for r in rows)
    shares = sum(gpu_milli(r) for r in rows if r["num_gpu"] == "1" and int(r["gpu_milli"]) < 1000)
    return shares / total


def test_names_read_as_the_published_traces_do() -> None:
    assert parse_name("cpu050") == ("cpu", 0.05)
    assert parse_name("cpu300") == ("cpu", 0.3)
    assert parse_name("gpushare100") == ("gpushare", 1.0)
    assert parse_name("multigpu20") == ("multigpu", 0.2)
    for bad in ("gpushare0", "cpu1000", "default", "gpuspec"):
        with pytest.raises(ValueError):
            parse_name(bad)


@pytest.mark.parametrize("name", ["cpu0", "cpu050", "cpu250"])
def test_cpu_traces_keep_the_gpu_pods_and_set_the_cpu_only_share(name: str) -> None:
    rows = default_like()
    out = resample(rows, name, seed=1)
    gpu_in = [(r["cpu_milli"], r["num_gpu"], r["gpu_milli"]) for r in rows if gpu_milli(r)]
    gpu_out = [(r["cpu_milli"], r["num_gpu"], r["gpu_milli"]) for r in out if gpu_milli(r)]
    assert gpu_in == gpu_out
    cpu_only = sum(1 for r in out if not gpu_milli(r)) / len(out)
    assert cpu_only == pytest.approx(parse_name(name)[1], abs=0.002)


@pytest.mark.parametrize("name", ["gpushare20", "gpushare80", "gpushare100"])
def test_gpushare_traces_give_sharing_pods_that_part_of_the_gpu_request(name: str) -> None:
    rows = default_like()
    out = resample(rows, name, seed=1)
    assert len(out) == len(rows)
    assert sum(not gpu_milli(r) for r in out) == sum(not gpu_milli(r) for r in rows)
    assert share_part(out) == pytest.approx(parse_name(name)[1], abs=0.03)


def test_multigpu_traces_append_multi_gpu_pods_until_their_part_is_reached() -> None:
    rows = default_like()
    out = resample(rows, "multigpu50", seed=1)
    assert [r["cpu_milli"] for r in out[: len(rows)]] == [r["cpu_milli"] for r in rows]
    total = sum(gpu_milli(r) for r in out)
    multi = sum(gpu_milli(r) for r in out if int(r["num_gpu"]) > 1)
    assert 0.5 <= multi / total < 0.51


def test_gpuspec_traces_constrain_that_part_of_the_gpu_request_by_shape() -> None:
    rows = default_like()
    published = [
        {"num_gpu": "1", "gpu_milli": "470", "gpu_spec": "T4"},
        {"num_gpu": "1", "gpu_milli": "1000", "gpu_spec": "G2|V100M32"},
        {"num_gpu": "8", "gpu_milli": "1000", "gpu_spec": "G2"},
    ]
    out = resample(rows, "gpuspec33", seed=1, constraints=constraint_choices(published))
    total = sum(gpu_milli(r) for r in out)
    constrained = [r for r in out if r["gpu_spec"]]
    assert 0.33 <= sum(gpu_milli(r) for r in constrained) / total < 0.34
    for r in constrained:
        if r["num_gpu"] == "1" and r["gpu_milli"] != "1000":
            assert r["gpu_spec"] == "T4"
        elif r["num_gpu"] in ("2", "8"):
            assert r["gpu_spec"] == "G2"  # 2 GPUs: the nearest larger shape's
        else:
            assert r["gpu_spec"] == "G2|V100M32"


def test_resampling_is_seeded_and_renames_in_order() -> None:
    rows = default_like()
    a, b = resample(rows, "gpushare60", seed=4), resample(rows, "gpushare60", seed=4)
    assert a == b != resample(rows, "gpushare60", seed=5)
    assert [r["name"] for r in a] == [f"openb-pod-{i:04d}" for i in range(len(a))]
