"""Which chip counts a job may ask for, and upstream's words when it may not."""

from __future__ import annotations

import re

import pytest

from contract.chip_names import InvalidInput
from scheduler_core.engine.handlers import product_for_selector
from scheduler_core.engine.validation import JobInvalid, validate_job
from tests.unit.helpers import job


def rejection(
    *requests: int,
    name: str = "job",
    namespace: str = "default",
    product: str = "module910x8",
    labels: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
) -> str:
    built = job(
        *requests,
        name=name,
        namespace=namespace,
        product=product,
        labels=labels,
        selector=selector,
    )
    with pytest.raises(JobInvalid) as raised:
        validate_job(built)
    return str(raised.value)


def test_upstream_case12_a_single_pod_may_not_ask_for_three_chips() -> None:
    assert rejection(3, name="job02", namespace="vcjob") == (
        "huawei.com/Ascend910module checkSingleTrainMode vcjob/job02 req npu not in [1,2,4,8]"
    )


@pytest.mark.parametrize("req", [1, 2, 4, 8])
def test_a_single_pod_may_ask_for_one_two_four_or_eight_chips(req: int) -> None:
    assert validate_job(job(req)).name == "module910x8"


def test_more_than_eight_chips_are_eight_per_pod() -> None:
    validate_job(job(8, 8, 8))


def test_a_distributed_job_with_fewer_than_eight_chips_per_pod_is_rejected() -> None:
    assert "every pod must take a whole server of 8 chips" in rejection(4, 4)


def test_a_distributed_task_outside_the_sizes_gets_upstreams_message() -> None:
    assert rejection(8, 3, name="j") == "checkModuleDistributeTrainMode j-1 req 3 not in [1,2,4,8]"


def test_a_job_without_npu_tasks_is_not_an_npu_job() -> None:
    assert rejection(0, name="cpu-only") == "cpu-only no npu job"


def test_tasks_without_npu_are_allowed_beside_npu_tasks() -> None:
    assert len(job(0, 2).npu_tasks) == 1
    validate_job(job(0, 2))


def test_half_allows_one_two_or_four() -> None:
    assert rejection(8, product="half910x4", name="h", namespace="ns") == (
        "huawei.com/Ascend910half checkSingleTrainMode ns/h req npu not in [1,2,4]"
    )


def test_card_allows_one_or_two() -> None:
    assert rejection(4, product="card910x2", name="c").endswith("req npu not in [1,2]")


@pytest.mark.parametrize("req", [9, 11, 13, 15, 17])
def test_910bx16_rejects_odd_counts_above_eight(req: int) -> None:
    assert rejection(req, product="module910bx16", name="b") == (
        "huawei.com/Ascend910module-910b-16 checkJobTrainMode b req npu is invalid"
    )


@pytest.mark.parametrize("req", [3, 5, 7, 10, 16])
def test_910bx16_accepts_other_counts(req: int) -> None:
    validate_job(job(req, product="module910bx16"))


def test_910b_rejects_a_contradicting_ring_controller_label() -> None:
    labels = {"ring-controller.atlas": "ascend-910"}
    assert rejection(2, product="module910bx8", name="b", labels=labels) == (
        "b label:ascend-910 not right(ascend-910b)"
    )


def test_910bx16_runs_on_x86_hosts_only() -> None:
    selector = {"host-arch": "huawei-arm"}
    assert "host-arch:huawei-arm" in rejection(2, product="module910bx16", selector=selector)


def test_the_handler_comes_from_the_accelerator_type_selector_defaulting_to_module() -> None:
    assert product_for_selector({}).name == "module910x8"
    assert product_for_selector({"accelerator-type": "module-910b-16"}).name == "module910bx16"
    assert product_for_selector({"accelerator-type": "card"}).name == "card910x2"


def test_an_unknown_accelerator_type_is_not_supported() -> None:
    with pytest.raises(InvalidInput, match=re.escape("not support huawei.com/Ascend910chip-x")):
        product_for_selector({"accelerator-type": "chip-x"})
