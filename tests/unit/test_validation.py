"""Which chip counts a job may ask for, and upstream's words when it may not."""

from __future__ import annotations

import re

import pytest

from chip_topology.products import Product
from chip_topology.routing import product_for_job
from contract.chip_names import ASCEND910, InvalidInput
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


# MindCluster v26.1.0's module910x8 keeps the base handler's ValidNPUJob with 3, 5, 6 and 7 left
# out (component/ascend-for-volcano/internal/npu/ascend910/ascend910old/module910x8/frame.go
# New; internal/npu/base/frame.go ValidNPUJob), for one pod as for many: VOL-v5's
# checkSingleTrainMode and its 8-per-pod rule for distributed jobs are gone.
MODULE_EXPECTED = "req npu num should small than 8, and not in map[3:{} 5:{} 6:{} 7:{}]"


def test_a_single_pod_may_not_ask_for_three_chips_in_the_base_handlers_words() -> None:
    assert rejection(3, name="job02", namespace="vcjob") == (
        f"expected: job<vcjob/job02> {MODULE_EXPECTED}, actual: task<job02-0> req npu: 3, "
    )


@pytest.mark.parametrize("req", [1, 2, 4, 8])
def test_a_single_pod_may_ask_for_one_two_four_or_eight_chips(req: int) -> None:
    assert validate_job(job(req)).name == "module910x8"


def test_more_than_eight_chips_are_eight_per_pod() -> None:
    validate_job(job(8, 8, 8))
    assert rejection(16, name="big") == (
        f"expected: job<default/big> {MODULE_EXPECTED}, actual: task<big-0> req npu: 16, "
    )


@pytest.mark.parametrize("req", [1, 2, 4])
def test_a_distributed_job_may_ask_fewer_than_eight_chips_per_pod(req: int) -> None:
    # The comparison against Huawei's plugin in a real Volcano v1.12.0: a job of two pods of
    # 4 chips each on 910 x8 servers is placed there; the old rule refused it.
    assert validate_job(job(req, req)).name == "module910x8"
    validate_job(job(8, req, req))  # nor need the pods ask alike


def test_a_distributed_task_outside_the_sizes_gets_upstreams_message() -> None:
    assert rejection(8, 3, 5, name="j") == (
        f"expected: job<default/j> {MODULE_EXPECTED}, "
        "actual: task<j-1> req npu: 3task<j-2> req npu: 5, "
    )


def test_a_job_without_npu_tasks_is_not_an_npu_job() -> None:
    assert rejection(0, name="cpu-only") == "cpu-only no npu job"


def test_tasks_without_npu_are_allowed_beside_npu_tasks() -> None:
    assert len(job(0, 2).npu_tasks) == 1
    validate_job(job(0, 2))


# MindCluster builds half and card on its base handler (Ascend/mind-cluster
# component/ascend-for-volcano/internal/npu/factory.go initCard910ByBaseHandler; base/frame.go
# ValidNPUJob): VOL-v5's card910x2 / half910x4 sizes and messages are gone.
def test_half_allows_one_two_or_four() -> None:
    assert rejection(3, product="half910x4", name="h", namespace="ns") == (
        "expected: job<ns/h> req npu num should small than 4, and not in map[3:{}], "
        "actual: task<h-0> req npu: 3, "
    )
    assert "req npu: 8" in rejection(8, product="half910x4")


@pytest.mark.parametrize("req", [1, 2, 4, 8])
def test_a_card_server_takes_up_to_eight_chips(req: int) -> None:
    validate_job(job(req, product="card910x2"))
    validate_job(job(req, req, product="card910x2"))  # no whole-server rule


def test_a_card_task_above_eight_chips_is_refused_naming_it() -> None:
    assert rejection(9, product="card910x2", name="c") == (
        "expected: job<default/c> req npu num should small than 8, and not in map[], "
        "actual: task<c-0> req npu: 9, "
    )


@pytest.mark.parametrize("req", [9, 11, 13, 15, 17])
def test_910bx16_rejects_odd_counts_above_eight(req: int) -> None:
    assert rejection(req, product="module910bx16", name="b") == (
        "expected: job<default/b> req npu num should small than 16, and not in "
        f"map[9:{{}} 11:{{}} 13:{{}} 15:{{}}], actual: task<b-0> req npu: {req}, "
    )


@pytest.mark.parametrize("req", [3, 5, 7, 10, 16])
def test_910bx16_accepts_other_counts(req: int) -> None:
    validate_job(job(req, product="module910bx16"))


# MindCluster dropped VOL-v5's 910B label and architecture checks with the plugin refactor
# (dbde0740; no ring-controller / host-arch read in internal/npu/base or
# ascend910b/module910bx16): a job so labelled is accepted.
def test_910b_accepts_any_ring_controller_label() -> None:
    labels = {"ring-controller.atlas": "ascend-910"}
    assert validate_job(job(2, product="module910bx8", labels=labels)).name == "module910bx8"


def test_910bx16_runs_on_arm_hosts_too() -> None:
    selector = {"host-arch": "huawei-arm"}
    assert validate_job(job(2, product="module910bx16", selector=selector)).name == (
        "module910bx16"
    )


def test_the_handler_comes_from_the_accelerator_type_selector_defaulting_to_module() -> None:
    assert route({}).name == "module910x8"
    assert route({"accelerator-type": "module-910b-16"}).name == "module910bx16"
    assert route({"accelerator-type": "card"}).name == "card910x2"


def test_an_unknown_accelerator_type_is_not_supported() -> None:
    with pytest.raises(InvalidInput, match=re.escape("not support huawei.com/Ascend910chip-x")):
        route({"accelerator-type": "chip-x"})


def route(selector: dict[str, str]) -> Product:
    return product_for_job(ASCEND910, {}, {}, selector)
