"""Which job a pod names, and its rank in it, in the forms the controllers write."""

from __future__ import annotations

from contract.groups import COSCHEDULING, KUEUE, OWN, VOLCANO, group_of, rank_hint
from contract.pods import PodView, pod_view
from scheduler_core.service.state.gang_pods import GangPods
from scheduler_core.service.state.jobs import (
    JobDirectory,
    JobSettings,
    podgroup_info,
    unmarked_roles,
)
from scheduler_core.service.wire import BadPod, pod_request
from simulation.memory import pod_object


def test_a_pod_names_its_group_by_the_first_form_it_uses() -> None:
    both = group_of(
        "ns",
        {"scheduling.x-k8s.io/pod-group": "cosched", "ascend.npu/gang": "own"},
        {"scheduling.k8s.io/group-name": "vc"},
    )
    assert both is not None and (both.source, both.key) == (VOLCANO, "ns/vc")
    cosched = group_of("ns", {"scheduling.x-k8s.io/pod-group": "pg"}, {})
    assert cosched is not None and cosched.source == COSCHEDULING
    kueue = group_of(
        "ns",
        {"kueue.x-k8s.io/pod-group-name": "g"},
        {"kueue.x-k8s.io/pod-group-total-count": "3"},
    )
    assert kueue is not None and (kueue.source, kueue.size_text) == (KUEUE, "3")
    own = group_of("ns", {"ascend.npu/gang": "g"}, {})
    assert own is not None and (own.source, own.size_text) == (OWN, "1")
    assert group_of("ns", {"app": "x"}, {}) is None


def test_a_rank_comes_from_what_the_pods_controller_wrote() -> None:
    assert rank_hint({"statefulset.kubernetes.io/pod-name": "web-12"}, {}, None) == 12
    assert rank_hint({}, {"volcano.sh/task-index": "3"}, None) == 3
    kubeflow = {"training.kubeflow.org/replica-type": "worker"}
    assert rank_hint({**kubeflow, "training.kubeflow.org/replica-index": "0"}, {}, "1") == 1
    assert rank_hint({**kubeflow, "training.kubeflow.org/replica-index": "2"}, {}, None) == 3
    master = {"training.kubeflow.org/replica-type": "Master"}
    assert rank_hint({**master, "training.kubeflow.org/replica-index": "0"}, {}, None) == 0
    assert rank_hint({"batch.kubernetes.io/job-completion-index": "5"}, {}, None) == 5
    assert rank_hint({"volcano.sh/task-index": "x"}, {}, None) is None
    assert rank_hint({}, {}, "7") is None, "RANK counts only on a training-operator pod"


def test_a_podgroup_is_read_for_its_size_and_settings_and_a_malformed_one_says_why() -> None:
    good = podgroup_info(
        {
            "metadata": {"labels": {"tor-affinity": "normal-schema", "team": "a"}},
            "spec": {"minMember": 4},
        }
    )
    assert (good.min_member, dict(good.labels), good.error) == (
        4,
        {"tor-affinity": "normal-schema"},
        "",
    )
    assert "minMember 0" in podgroup_info({"metadata": {}, "spec": {"minMember": 0}}).error
    assert "minMember True" in podgroup_info({"metadata": {}, "spec": {"minMember": True}}).error
    assert "not an object" in podgroup_info({"metadata": [], "spec": {}}).error
    labels = {"metadata": {"labels": {"a": 1}}, "spec": {}}
    assert "not strings" in podgroup_info(labels).error


def _view(name: str, npu: int, notes: dict[str, str], node: str = "") -> PodView:
    pod = pod_object("ns", name, node or None, npu, annotations=notes)
    if not npu:
        pod["spec"]["containers"][0]["resources"] = {}
    return pod_view(pod)


def test_the_gang_is_the_groups_npu_pods_and_ranks_are_as_their_controller_gave_them() -> None:
    # A Volcano Job of a master asking no NPU and two workers under Volcano's hcclrank plugin
    # (master i → i, worker i → replicas(master) + i): minMember 3 counts all three.
    directory = JobDirectory(frozenset({VOLCANO}))
    directory.set_group(VOLCANO, "ns/pg", podgroup_info({"metadata": {}, "spec": {"minMember": 3}}))
    group = {"scheduling.k8s.io/group-name": "pg"}
    master = _view("master-0", 0, {**group, "hccl/rankIndex": "0"})
    workers = [_view(f"worker-{i}", 8, {**group, "hccl/rankIndex": str(i + 1)}) for i in range(2)]
    settings = directory.settings(workers[0], [master, *workers])
    assert (settings.gang, settings.size, settings.refusal) == ("pg", 2, "")
    assert settings.unmarked == ("master-0",)
    pods = GangPods()
    pods.set_gang("ns/pg", [master, *workers])
    assert pods.pending["ns/pg"] == ["worker-0", "worker-1"], "the master is not in the gang"
    assert pods.slots("ns/pg", 2) == [1, 2]
    # Ranks that repeat (two tasks each counting from 0) leave the gang to number its pods.
    twins = [_view(f"w-{i}", 8, {**group, "hccl/rankIndex": "0"}) for i in range(2)]
    pods.set_gang("ns/pg", twins)
    assert pods.slots("ns/pg", 2) == [0, 1]


def test_a_role_of_no_npu_is_unmarked_unless_upstreams_a3_marks_name_it() -> None:
    marked = [
        _view("scheduler-0", 0, {"volcano.sh/task-spec": "scheduler"}),
        _view("master-0", 0, {"huawei.com/skip-ascend-plugin": "enabled"}),
    ]
    assert unmarked_roles(marked) == ()
    assert unmarked_roles([_view("ray-head-0", 0, {"volcano.sh/task-spec": "head"})]) == (
        "ray-head-0",
    )


def test_an_a3_job_with_an_unmarked_role_is_refused_where_upstreams_check_reaches() -> None:
    # module910a3x16/frame.go: CheckTaskNPU runs for an even request of more than one chip;
    # superpod/frame.go: for a distributed job only.
    def request(policy: str, npu: int, size: int) -> str:
        notes = {"huawei.com/schedule_policy": policy}
        settings = JobSettings("g", size, {}, notes, unmarked=("ray-head-0",))
        try:
            pod_request(pod_object("ns", "w", None, npu), lambda _: settings)
        except BadPod as refused:
            return str(refused)
        return ""

    assert request("chip2-node16", 4, 2) == (
        "expected: only standalone job can request single npu, npu num required by task in "
        "a3×16 job must be 2n, and <= 16, actual: task<ray-head-0> req npu: 0, "
    )
    assert request("chip2-node16", 1, 1) == "", "one chip: ValidNPUJob returns before"
    assert request("chip2-node16-sp", 16, 1) == "", "a standalone super-pod job"
    assert "require npu(32) should be equal to node npu(16)" in request("chip2-node16-sp", 16, 2)
