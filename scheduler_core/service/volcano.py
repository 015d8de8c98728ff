"""Volcano's extender plugin verbs, on the same extender (Volcano's
``pkg/scheduler/plugins/extender``).

Volcano posts its internal structs without json tags, so keys are Go field names: a
``TaskInfo`` carries the full ``Pod`` and the session's ``NodeName``; a ``NodeInfo`` its
``Name``; a ``JobInfo`` its ``TotalRequest.ScalarResources`` in milli-units. Volcano binds
pods itself: ``allocateFunc`` writes the scheduler annotations before it does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contract.chip_names import RESOURCE_NAME
from contract.objects import npu_limit
from scheduler_core.service.extender import Extender
from scheduler_core.service.wire import BadPod

SUCCESS, UNSCHEDULABLE = 0, 2
PERMIT, ABSTAIN, REJECT = 1, 0, -1


class VolcanoVerbs:
    def __init__(self, extender: Extender, open_session: Callable[[], None]) -> None:
        self._extender = extender
        self._open_session = open_session

    def handle(self, verb: str, body: Mapping[str, Any]) -> Any:
        handler = getattr(self, f"_{verb}", None)
        if handler is None:
            raise KeyError(verb)
        return handler(body)

    def _onSessionOpen(self, body: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N802
        self._open_session()  # a fresh read; the session ledger starts empty again
        return {}

    def _onSessionClose(self, body: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N802
        return {}

    def _predicate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        pod, node = (
            (body.get("task") or {}).get("Pod") or {},
            (body.get("node") or {}).get("Name", ""),
        )
        answer = self._extender.filter({"Pod": pod, "NodeNames": [node]})
        if node in answer["NodeNames"]:
            return {"status": "", "code": SUCCESS}
        return {"status": answer["FailedNodes"].get(node, "not schedulable"), "code": UNSCHEDULABLE}

    def _prioritize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        pod = (body.get("task") or {}).get("Pod") or {}
        names = [n.get("Name", "") for n in body.get("nodes") or []]
        try:
            return {"nodeScore": self._extender.scores(pod, names), "errorMessage": ""}
        except BadPod as bad:
            return {"nodeScore": {}, "errorMessage": str(bad)}

    def _allocateFunc(self, body: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N802
        task = body.get("task") or {}
        pod = task.get("Pod") or {}
        if npu_limit(pod) == 0:
            return {"errorMessage": ""}
        try:
            return {"errorMessage": self._extender.annotate(pod, task.get("NodeName", ""))}
        except BadPod as bad:
            return {"errorMessage": str(bad)}

    def _deallocateFunc(self, body: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N802
        pod = (body.get("task") or {}).get("Pod") or {}
        if npu_limit(pod) > 0:
            try:
                self._extender.release(pod)
            except BadPod as bad:
                return {"errorMessage": str(bad)}
        return {"errorMessage": ""}

    def _jobEnqueueable(self, body: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N802
        scalars = ((body.get("job") or {}).get("TotalRequest") or {}).get("ScalarResources") or {}
        milli = scalars.get(RESOURCE_NAME, 0)
        if not milli:
            return {"status": ABSTAIN}
        return {"status": PERMIT if self._extender.free_chips() * 1000 >= milli else REJECT}
