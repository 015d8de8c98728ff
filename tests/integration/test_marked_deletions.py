"""The scheduler service's deletions and ConfigMaps as its admission policy admits them
(charts/ascend-npu/templates/admission-policy.yaml): each pod it deletes carries its mark,
``ascend-npu.io/deleting``, before the deletion, and each ConfigMap it writes its label; a pod
replaced meanwhile by another of its name is neither marked nor deleted."""

from __future__ import annotations

from collections.abc import Mapping

from contract.annotations import DELETING_ANNOTATION, WRITER_LABEL
from contract.objects import Obj
from scheduler_core.engine.rescheduling import FAULT_RESTART_REASON
from simulation.memory import MemoryCluster
from tests.integration.test_extender import add_node
from tests.integration.test_network_locality import Cluster


class Recording(MemoryCluster):
    """Records, at each deletion, the mark the pod carries then."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[str, str | None]] = []

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        annotations = self.get_pod(namespace, name)["metadata"].get("annotations") or {}
        self.marks.append((name, annotations.get(DELETING_ANNOTATION)))
        super().delete_pod(namespace, name, uid, grace_seconds)


def fault_job(c: Cluster) -> None:
    """A fault-scheduling: force job of two pods running on t0-s2, t0-s3; chip 3 of t0-s3
    fails."""
    for name in ("other-0", "other-1"):  # t0-s0 and t0-s1 taken first
        c.schedule(c.gang(name, 1)[0])
    for p in c.gang("job", 2, labels={"fault-scheduling": "force"}):
        c.schedule(p)
    for r in range(2):
        c.run(f"job-{r}")
    add_node(c.api, "t0-s3", frozenset({3}), address="10.0.0.3")


def test_each_pod_of_a_restarting_job_is_marked_then_deleted() -> None:
    api = Recording()
    c = Cluster(1, topology=False, api=api)
    fault_job(c)
    c.service.refresh()
    assert api.marks == [("job-0", FAULT_RESTART_REASON), ("job-1", FAULT_RESTART_REASON)]
    config = api.get_configmap("ns", "fault-config-job")
    key, value = WRITER_LABEL
    assert config["metadata"]["labels"][key] == value


def test_a_pod_replaced_by_another_of_its_name_is_neither_marked_nor_deleted() -> None:
    class Replacing(Recording):
        """The controller makes job-1 again (a new UID) just as the scheduler acts."""

        replaced = False

        def patch_pod_annotations(
            self,
            namespace: str,
            name: str,
            annotations: Mapping[str, str | None],
            resource_version: str,
            *,
            uid: str = "",
        ) -> Obj:
            if name == "job-1" and not self.replaced:
                self.replaced = True
                pod = self.get_pod(namespace, name)
                pod["metadata"]["uid"] = "new-uid"
                self.put("Pod", pod)
            return super().patch_pod_annotations(
                namespace, name, annotations, resource_version, uid=uid
            )

    api = Replacing()
    c = Cluster(1, topology=False, api=api)
    fault_job(c)
    c.service.refresh()
    assert api.marks == [("job-0", FAULT_RESTART_REASON)]
    kept = api.get_pod("ns", "job-1")
    assert DELETING_ANNOTATION not in (kept["metadata"].get("annotations") or {})
