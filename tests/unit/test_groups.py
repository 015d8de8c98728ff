"""Which job a pod names, and its rank in it, in the forms the controllers write."""

from __future__ import annotations

from contract.groups import COSCHEDULING, KUEUE, OWN, VOLCANO, group_of, rank_hint
from scheduler_core.service.jobs import podgroup_info


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
