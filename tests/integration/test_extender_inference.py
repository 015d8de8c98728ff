"""The extender's verbs for inference chips and vNPUs, as kube-scheduler and Volcano call
them, against the in-memory store: 310 / 310P / 300I Duo nodes, dynamic-vNPU (npu-core)
nodes and pre-created vNPU types beside 910 nodes."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

from agent.deviceinfo_publisher import configmap
from contract.chip_names import ASCEND310, ASCEND310P, ASCEND910, ChipKind
from contract.deviceinfo import DeviceInfo
from contract.vnpu import TEMPLATES_310P, parse_core_choice
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.verbs.volcano import VolcanoVerbs
from scheduler_core.service.wire import ExtenderFilterResult
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import Clock, schedule

NPU_CORE = "huawei.com/npu-core"


def add_node(
    api: MemoryCluster,
    name: str,
    kind: ChipKind,
    chips: int,
    *,
    labels: Mapping[str, str] | None = None,
    unhealthy: frozenset[int] = frozenset(),
    cores: int = 0,
) -> None:
    """A node of ``chips`` chips of ``kind``; with ``cores`` a dynamic-vNPU node offering
    ``huawei.com/npu-core`` (``cores`` AI cores per chip), as the agent registers it."""
    offered = {NPU_CORE: str(chips * cores)} if cores else {kind.resource: str(chips)}
    allocatable = dict(offered)
    if not cores:
        allocatable[kind.resource] = str(chips - len(unhealthy))
    node_labels = dict(labels or {})
    if cores:
        node_labels["servertype"] = f"{kind.name}-{cores}"
    api.put(
        "Node",
        {
            "metadata": {"name": name, "labels": node_labels},
            "status": {"capacity": offered, "allocatable": allocatable},
        },
    )
    info = DeviceInfo(
        frozenset(range(chips)) - unhealthy,
        unhealthy,
        frozenset(),
        update_time=1_700_000_000,
        kind=kind,
    )
    api.put("ConfigMap", configmap(name, info))


class Cluster:
    def __init__(self, api: MemoryCluster) -> None:
        self.api = api
        self.clock = Clock()
        self.extender = Extender(api, clock=self.clock)
        self.service = SchedulerService(api, self.extender, clock=self.clock)
        self.service.refresh()
        self.names = sorted(n["metadata"]["name"] for n in api.list_nodes())
        self.volcano = VolcanoVerbs(self.extender, lambda: None)

    def pod(
        self, name: str, resource: str, count: int, labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        self.api.put("Pod", pod_object("ns", name, None, count, resource=resource, labels=labels))
        return self.api.get_pod("ns", name)

    def filter(self, pod: dict[str, Any]) -> ExtenderFilterResult:
        return self.extender.filter({"Pod": pod, "NodeNames": self.names})

    def schedule(self, pod: dict[str, Any]) -> str | None:
        return schedule(self.extender, pod, self.names)

    def annotation(self, name: str, key: str) -> str:
        return str(self.api.get_pod("ns", name)["metadata"]["annotations"].get(key, ""))

    def created(self, name: str, real: str) -> None:
        """The agent has allocated the pod: consumed, its vNPU recorded in AscendReal."""
        pod = self.api.get_pod("ns", name)
        pod["metadata"]["annotations"]["predicate-time"] = str(2**64 - 1)
        pod["metadata"]["annotations"]["huawei.com/AscendReal"] = real
        pod["status"]["phase"] = "Running"
        self.api.put("Pod", pod)


def mixed() -> Cluster:
    api = MemoryCluster()
    add_node(api, "a910", ASCEND910, 8)
    add_node(api, "b310", ASCEND310, 8)
    add_node(api, "c310p", ASCEND310P, 4)
    add_node(api, "d-duo", ASCEND310P, 4, labels={"infer-card-type": "card-300i-duo"})
    return Cluster(api)


def vnpu_nodes(*chips: int) -> Cluster:
    api = MemoryCluster()
    for i, n in enumerate(chips):
        add_node(api, f"v{i}", ASCEND310P, n, cores=8)
    return Cluster(api)


# ---- whole inference chips ---------------------------------------------------------------


def test_a_310p_pod_gets_310p_chips_named_as_upstream_writes_them() -> None:
    c = mixed()
    pod = c.pod("p", "huawei.com/Ascend310P", 2)
    answer = c.filter(pod)
    assert answer.NodeNames == ["c310p", "d-duo"]
    assert answer.FailedAndUnresolvableNodes["a910"] == (
        "node a910 has huawei.com/Ascend910 chips, the task asks for huawei.com/Ascend310P"
    )
    assert c.schedule(pod) in {"c310p", "d-duo"}
    assert c.annotation("p", "huawei.com/Ascend310P") == "Ascend310P-0,Ascend310P-1"
    assert c.annotation("p", "predicate-time").isdigit()
    assert c.annotation("p", "huawei.com/Ascend910") == ""


def test_a_310p_node_runs_out_before_its_agent_publishes_again() -> None:
    c = mixed()
    c.names = ["c310p"]
    given = []
    for i in range(2):
        assert c.schedule(c.pod(f"p{i}", "huawei.com/Ascend310P", 2)) == "c310p"
        given.append(c.annotation(f"p{i}", "huawei.com/Ascend310P"))
    assert given == ["Ascend310P-0,Ascend310P-1", "Ascend310P-2,Ascend310P-3"]
    answer = c.filter(c.pod("third", "huawei.com/Ascend310P", 1))
    # no chip idle: MindCluster's framework's words (plugin/job.go checkNodeNum)
    assert answer.FailedNodes["c310p"] == (
        "NPUResourceShortage: huawei.com/Ascend310P, task requires 1 NPU cards but node idle is 0"
    )


def test_a_310_card_job_takes_the_card_with_exactly_its_free_chips() -> None:
    api = MemoryCluster()
    add_node(api, "b310", ASCEND310, 8, unhealthy=frozenset({3}))
    c = Cluster(api)
    pod = c.pod("p", "huawei.com/Ascend310", 3, {"npu-310-strategy": "card"})
    assert c.schedule(pod) == "b310"
    assert c.annotation("p", "huawei.com/Ascend310") == "Ascend310-0,Ascend310-1,Ascend310-2"


def test_a_310_job_of_an_unknown_strategy_is_refused_with_upstreams_message() -> None:
    c = mixed()
    answer = c.filter(c.pod("p", "huawei.com/Ascend310", 1, {"npu-310-strategy": "ring"}))
    assert answer.NodeNames == []
    assert set(answer.FailedAndUnresolvableNodes.values()) == {
        "not support huawei.com/Ascend310ring"
    }


def test_a_duo_chip_job_runs_only_on_a_node_labelled_as_a_300i_duo() -> None:
    c = mixed()
    pod = c.pod("p", "huawei.com/Ascend310P", 1, {"duo": "true"})
    answer = c.filter(pod)
    assert answer.NodeNames == ["d-duo"]
    # upstream names the label's value (empty when missing; chip310px2/frame.go)
    assert answer.FailedAndUnresolvableNodes["c310p"] == (
        "judgeNodeLabel node card label not right, is "
    )


def test_gangs_are_of_910_and_950_pods_only() -> None:
    c = mixed()
    pod = c.pod("p", "huawei.com/Ascend310P", 1, {"ascend.npu/gang": "g"})
    answer = c.filter(pod)
    assert answer.NodeNames == []
    assert (
        "gangs are of huawei.com/Ascend910 or huawei.com/npu pods, not huawei.com/Ascend310P"
        in answer.FailedAndUnresolvableNodes["c310p"]
    )


def test_no_pod_ever_lands_on_a_node_of_another_chip_kind() -> None:
    """Seeded mixes of 910, 310 and 310P pods over a mixed cluster: every bound pod is on a
    node of its own chip kind, and no chip is given twice."""
    for seed in range(5):
        rng = random.Random(seed)
        c = mixed()
        kinds = [ASCEND910, ASCEND310, ASCEND310P]
        sizes = {ASCEND910: [1, 2, 4], ASCEND310: [1, 2, 3], ASCEND310P: [1, 2]}
        node_kind = {"a910": ASCEND910, "b310": ASCEND310, "c310p": ASCEND310P, "d-duo": ASCEND310P}
        given: Counter[tuple[str, str]] = Counter()
        for i in range(12):
            kind = rng.choice(kinds)
            node = c.schedule(c.pod(f"p{i}", kind.resource, rng.choice(sizes[kind])))
            if node is None:
                continue
            assert node_kind[node] is kind, (seed, i, node, kind)
            for chip in c.annotation(f"p{i}", kind.resource).split(","):
                given[(node, chip)] += 1
        assert given and max(given.values()) == 1, seed


# ---- dynamic vNPU ------------------------------------------------------------------------


def test_a_vnpu_pod_gets_a_template_on_the_lowest_best_fitting_stable_chip() -> None:
    c = vnpu_nodes(4)
    assert c.schedule(c.pod("a", NPU_CORE, 2)) == "v0"
    assert c.annotation("a", NPU_CORE) == "0-vir02_1c"
    assert c.annotation("a", "predicate-time").isdigit()
    assert c.schedule(c.pod("b", NPU_CORE, 2)) == "v0"
    assert c.annotation("b", NPU_CORE) == "1-vir02_1c", "chip 0's vNPU is not created yet"
    c.created("a", "Ascend310P-2c.1cpu-100-0_0")
    c.service.refresh()
    assert c.schedule(c.pod("c", NPU_CORE, 2)) == "v0"
    assert c.annotation("c", NPU_CORE) == "0-vir02_1c", "the fullest stable chip that fits"


def test_one_template_at_a_time_is_created_on_a_node() -> None:
    c = vnpu_nodes(4)
    c.schedule(c.pod("a", NPU_CORE, 2))
    four = c.pod("four", NPU_CORE, 4)
    answer = c.filter(four)
    assert answer.FailedNodes["v0"] == "four is using v0, and not rewrite"
    c.service.refresh()  # the view shows the pod, its vNPU not created yet
    assert c.filter(four).NodeNames == []
    c.created("a", "Ascend310P-2c.1cpu-100-0_0")
    c.service.refresh()
    assert c.schedule(four) == "v0"
    assert c.annotation("four", NPU_CORE) == "0-vir04_3c", "chip 0 has 6 cores and 6 CPUs"


def test_an_ai_core_is_never_given_twice_even_before_the_view_catches_up() -> None:
    """A chip whose vNPU is being created takes no other until it is; each round the agent
    creates the round's vNPUs and the view catches up."""
    c = vnpu_nodes(4)
    per_chip: Counter[int] = Counter()
    for i in range(17):
        node = c.schedule(c.pod(f"p{i}", NPU_CORE, 2))
        if node is None:
            assert i == 16, "4 chips of 8 AI cores hold 16 vNPUs of 2"
            break
        choice = parse_core_choice(c.annotation(f"p{i}", NPU_CORE))
        assert choice.template == "vir02_1c"
        assert choice.chips[0] == i % 4, "one vNPU in creation per chip"
        per_chip[choice.chips[0]] += TEMPLATES_310P["vir02_1c"].cores
        if i % 4 == 3:
            for k in range(i - 3, i + 1):
                c.created(f"p{k}", f"Ascend310P-2c.1cpu-{100 + k}-{k % 4}_{k // 4}")
            c.service.refresh()
    assert per_chip == {0: 8, 1: 8, 2: 8, 3: 8}


def test_whole_chips_of_npu_cores_skip_a_chip_carrying_a_vnpu() -> None:
    c = vnpu_nodes(4)
    c.schedule(c.pod("small", NPU_CORE, 1))
    c.created("small", "Ascend310P-1c-100-0_0")
    c.service.refresh()
    assert c.schedule(c.pod("whole", NPU_CORE, 16)) == "v0"
    assert c.annotation("whole", NPU_CORE) == "1,2"


def test_the_node_with_the_fewest_idle_ai_cores_scores_best() -> None:
    c = vnpu_nodes(4, 2)
    pod = c.pod("p", NPU_CORE, 2)
    scores = {s.Host: s.Score for s in c.extender.prioritize({"Pod": pod, "NodeNames": c.names})}
    assert scores == {"v0": 0, "v1": 10}
    assert c.extender.scores(pod, c.names) == {"v0": 0.0, "v1": 8.0}


def test_a_high_level_task_is_downgraded_where_the_ai_cpus_run_short() -> None:
    c = vnpu_nodes(1)
    for name, template in (("x", "vir04_3c"), ("y", "vir02_1c")):
        c.schedule(c.pod(name, NPU_CORE, int(template[3:5])))
        c.created(name, f"Ascend310P-{template}-0-0_0")
    c.service.refresh()
    # chip 0 has 2 cores and 3 CPUs left; chips 1..: none (one chip). vir02 wants 2 CPUs.
    high = c.pod("high", NPU_CORE, 2, {"vnpu-level": "high"})
    assert c.schedule(high) == "v0"
    assert c.annotation("high", NPU_CORE) == "0-vir02"
    assert c.extender.scores(high, c.names) == {}


def test_a_vnpu_request_upstream_refuses_fails_every_node_with_its_message() -> None:
    c = vnpu_nodes(4)
    assert set(c.filter(c.pod("p", NPU_CORE, 3)).FailedAndUnresolvableNodes.values()) == {
        "expected: task req npu should be [1,2,4,8,10], actual: task<> req npu: 3, "
    }
    dvpp = c.pod("q", NPU_CORE, 1, {"vnpu-dvpp": "yes"})
    assert set(c.filter(dvpp).FailedAndUnresolvableNodes.values()) == {
        "expected: , actual: task<> has error:  req 1 ai-core, but dvpp label is:yes, "
    }
    other = c.pod("r", NPU_CORE, 5, {"ring-controller.atlas": "ascend-910b"})
    assert c.filter(other).FailedAndUnresolvableNodes["v0"] == (
        "v0 cuts Ascend310P chips; r's ring-controller.atlas asks for Ascend910 vNPUs"
    )
    unknown = c.pod("s", NPU_CORE, 2, {"ring-controller.atlas": "ascend-910c"})
    assert (
        "dynamic vNPU is for Ascend310P (ascend-310P) and 910B / A3"
        in (c.filter(unknown).FailedAndUnresolvableNodes["v0"])
    )


def volcano(c: Any, verb: str, body: dict[str, Any]) -> Any:
    """A Volcano verb's typed answer (one of several Structs)."""
    return c.volcano.handle(verb, body)


def test_volcano_allocates_a_vnpu_and_deallocate_gives_it_back() -> None:
    c = vnpu_nodes(4)
    pod = c.pod("p", NPU_CORE, 2)
    task = {"task": {"Pod": pod, "NodeName": "v0"}}
    assert volcano(c, "predicate", {**task, "node": {"Name": "v0"}}).code == 0
    assert volcano(c, "allocateFunc", task).error_message == ""
    assert c.annotation("p", NPU_CORE) == "0-vir02_1c"
    four = c.pod("four", NPU_CORE, 4)
    busy = volcano(c, "predicate", {"task": {"Pod": four}, "node": {"Name": "v0"}})
    assert busy.status == "four is using v0, and not rewrite"
    assert volcano(c, "deallocateFunc", task).error_message == ""
    free = volcano(c, "predicate", {"task": {"Pod": four}, "node": {"Name": "v0"}})
    assert free.code == 0


def test_volcano_enqueues_a_vnpu_job_while_the_nodes_have_its_ai_cores() -> None:
    c = vnpu_nodes(4)

    def enqueue(resource: str, count: int) -> int:
        job = {"TotalRequest": {"ScalarResources": {resource: count * 1000}}}
        return int(volcano(c, "jobEnqueueable", {"job": job}).status)

    assert c.extender.state.node_count() == 1, "the NPU nodes metric counts vNPU nodes"
    assert enqueue(NPU_CORE, 32) == 1
    assert enqueue(NPU_CORE, 33) == -1
    assert enqueue("huawei.com/Ascend910", 1) == -1, "no 910 node here"


# ---- pre-created vNPU types -------------------------------------------------------------


def test_a_pre_created_vnpu_pod_asks_for_one_and_is_bound_without_annotations() -> None:
    c = vnpu_nodes(1)
    two = c.pod("two", "huawei.com/Ascend310P-2c", 2)
    answer = c.filter(two)
    assert answer.NodeNames == []
    assert answer.FailedAndUnresolvableNodes["v0"].startswith("two req 2 not 1")
    one = c.pod("one", "huawei.com/Ascend310P-2c", 1)
    assert c.schedule(one) == "v0"
    bound = c.api.get_pod("ns", "one")
    assert bound["spec"]["nodeName"] == "v0"
    assert bound["metadata"]["annotations"] == {}


def test_a_node_whose_deviceinfo_or_labels_do_not_match_its_resource_is_left_out_saying_why() -> (
    None
):
    api = MemoryCluster()
    add_node(api, "v0", ASCEND310P, 4, cores=8)
    add_node(api, "mixed-up", ASCEND310, 4, cores=8)  # npu-core, but 310 DeviceInfo
    add_node(api, "unlabelled", ASCEND310P, 4, cores=8)
    node = api.get_node("unlabelled")
    node["metadata"]["labels"] = {}
    api.put("Node", node)
    c = Cluster(api)
    answer = c.filter(c.pod("p", NPU_CORE, 1))
    assert answer.NodeNames == ["v0"]
    assert answer.FailedNodes["mixed-up"] == (
        "mixed-up: its DeviceInfo lists Ascend310 chips, the node offers huawei.com/npu-core"
    )
    assert answer.FailedNodes["unlabelled"] == (
        "unlabelled: huawei.com/npu-core node without a readable label: "
        "servertype '' is not <chip kind>-<AI cores per chip>"
    )


def test_hostile_labels_capacities_and_annotations_leave_a_node_out_or_count_nothing() -> None:
    api = MemoryCluster()
    add_node(api, "v0", ASCEND310P, 4, cores=8)
    for name, label in (("zero", "Ascend310P-0"), ("huge", "Ascend310P-" + "9" * 50)):
        add_node(api, name, ASCEND310P, 4, cores=8)
        node = api.get_node(name)
        node["metadata"]["labels"]["servertype"] = label
        api.put("Node", node)
    add_node(api, "nonsense", ASCEND310P, 4, cores=8)
    node = api.get_node("nonsense")
    node["status"]["capacity"] = {NPU_CORE: "1e9"}
    api.put("Node", node)
    for i, text in enumerate(["0-vir99", "999-vir01", "0-" + "x" * 10_000, "1,1", ""]):
        notes = {NPU_CORE: text, "huawei.com/AscendReal": "Ascend310P-1c-1-0_" + "9" * 30}
        bad = pod_object("ns", f"bad{i}", "v0", 1, annotations=notes, resource=NPU_CORE)
        bad["status"]["phase"] = "Running"
        api.put("Pod", bad)
    c = Cluster(api)
    answer = c.filter(c.pod("p", NPU_CORE, 2))
    assert answer.NodeNames == ["v0"], "the unreadable annotations count nothing"
    assert "no AI CPU count known for Ascend310P with 0 AI cores" in answer.FailedNodes["zero"]
    assert "is not <chip kind>-<AI cores per chip>" in answer.FailedNodes["huge"]
    assert answer.FailedAndUnresolvableNodes["nonsense"] == ("nonsense is not a dynamic vNPU node")
    assert c.schedule(c.pod("q", NPU_CORE, 2)) == "v0"


def failed(api: MemoryCluster, name: str, resource: str, message: str) -> None:
    pod = pod_object("ns", name, "v0", 2, resource=resource, phase="Failed")
    pod["status"].update(reason="UnexpectedAdmissionError", message=message)
    api.put("Pod", pod)


def test_a_pod_whose_vnpu_could_not_be_made_is_deleted_for_its_controller_to_remake() -> None:
    api = MemoryCluster()
    add_node(api, "v0", ASCEND310P, 4, cores=8)
    cut = "Allocate failed due to rpc error: NPUSegmentFailed: 2 of 8 AI cores free, which is"
    failed(api, "cut", NPU_CORE, cut)
    failed(api, "missing", NPU_CORE, "Allocate failed due to NoNPUResource: chip 3 is missing")
    failed(api, "other", NPU_CORE, "Allocate failed due to no pod found, which is unexpected")
    failed(api, "a910", "huawei.com/Ascend910", "Allocate failed due to NPUSegmentFailed")
    c = Cluster(api)  # its first read deletes them
    left = {p["metadata"]["name"] for p in api.list_pods(None)[0]}
    assert left == {"other", "a910"}
    c.extender.state.events.flush()
    deleted = {e["involvedObject"]["name"] for e in api.events if e["reason"] == "chipDyCutErr"}
    assert deleted == {"cut", "missing"}
    c.service.maintain()
    assert len([e for e in api.events if e["reason"] == "chipDyCutErr"]) == 2, "once each"
