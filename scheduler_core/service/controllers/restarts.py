"""The fault-restart controller: deletes the pods of fault jobs (and of gangs partly running
too long) so that their jobs restart, and records the restarts in the fault record
(``vcjob-fault-npu-cm``) and each job's ``fault-config-<job>``, from which a restarted
scheduler, or a new leader, resumes them (``restore_once``). What is restarting, and each
job's hold, is the state's (``state.fault_restarts``); this acts on it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from contract.annotations import FAULT_RECORD
from contract.chip_names import InvalidInput
from infra.events import pod_ref
from infra.kube.port import KubeError, KubeGateway, NotFound
from scheduler_core.engine import rescheduling
from scheduler_core.service.controllers.configmaps import OwnedConfigMaps
from scheduler_core.service.controllers.deletions import delete_marked
from scheduler_core.service.state.extender_state import ExtenderState

log = logging.getLogger(__name__)


class FaultRestarter:
    def __init__(
        self,
        gateway: KubeGateway,
        state: ExtenderState,
        configmaps: OwnedConfigMaps,
        read_record: Callable[[], Mapping[str, str] | None],
    ) -> None:
        self._gateway = gateway
        self._state = state
        self._configmaps = configmaps
        self._read_record = read_record  # the fault record as the watches last saw it
        self._restored = False

    def lead(self) -> None:
        """This replica now leads: restore from the record once more (the last leader's)."""
        self._restored = False

    def restore_once(self) -> None:
        """Fault jobs restarting when this scheduler (re)started or took the lead: from the
        record it (or the leader before it) wrote."""
        if self._restored:
            return
        data = self._read_record()
        self._restored = True
        if data is None:
            return
        try:
            faults = rescheduling.restore(data)
            retries = rescheduling.restore_retries(data)
        except InvalidInput as bad:
            log.error("fault record not restored: %s", bad)
            return
        self._state.restore_faults(faults, retries)
        self._configmaps.read_back(*FAULT_RECORD, data)

    def run(self) -> None:
        for deletion in self._state.restart_deletions():
            key = f"{deletion.namespace}/{deletion.name}"
            try:
                delete_marked(
                    self._gateway,
                    deletion.namespace,
                    deletion.name,
                    deletion.uid,
                    grace_seconds=deletion.grace_seconds,
                    reason=deletion.reason,
                )
                log.warning(
                    "deleted %s (grace %s): %s",
                    key,
                    deletion.grace_seconds,
                    deletion.why,
                    extra={"pod": key},
                )
                about = pod_ref(deletion.namespace, deletion.name, deletion.uid)
                self._state.events.warn(about, deletion.reason, deletion.why)
            except NotFound:
                pass  # already gone (or replaced: the UID precondition keeps the new one)
            except KubeError as failed:
                log.warning("pod %s of a restarting job not deleted: %s", key, failed)
        record, configs = self._state.fault_records()
        # No record before a first fault or restart.
        if configs or rescheduling.RETRIES_KEY in record or self._configmaps.written(*FAULT_RECORD):
            self._configmaps.write(*FAULT_RECORD, record)
        for (namespace, name), data in configs.items():
            self._configmaps.write(namespace, name, data)
