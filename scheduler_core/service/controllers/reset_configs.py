"""The reset-config controller: Volcano's update of a restarting job's ``reset-config-<job>``
(``rescheduling.reset_config``), only when the user made one (label ``reset=true``): never
created. Which updates are due is the state's (``ExtenderState.resets_due``)."""

from __future__ import annotations

import logging
import time

from contract.chip_names import InvalidInput
from infra.kube.port import KubeError, KubeGateway, NotFound
from scheduler_core.engine import rescheduling
from scheduler_core.service.state.extender_state import ExtenderState
from scheduler_core.service.state.fault_restarts import ResetUpdate

log = logging.getLogger(__name__)


class ResetConfigs:
    def __init__(self, gateway: KubeGateway, state: ExtenderState) -> None:
        self._gateway = gateway
        self._state = state

    def run(self) -> None:
        for namespace, job, update in self._state.resets_due():
            self._update(namespace, job, update)

    def _update(self, namespace: str, job: str, update: ResetUpdate) -> None:
        name = rescheduling.RESET_CONFIG_PREFIX + job
        try:
            current = self._gateway.get_configmap(namespace, name)
        except NotFound:
            return  # the job asked for none
        except KubeError as failed:
            log.warning("configmap %s/%s not read: %s", namespace, name, failed)
            return
        meta = current.get("metadata") or {}
        if (meta.get("labels") or {}).get("reset") != "true":
            return
        try:
            data = rescheduling.reset_config(
                current.get("data") or {},
                time.time(),
                pod_level=update.pod_level,
                graceful_exit=update.graceful_exit,
            )
        except InvalidInput as bad:
            log.warning("configmap %s/%s not updated: %s", namespace, name, bad)
            return
        try:
            self._gateway.update_configmap({**current, "data": data})
        except KubeError as failed:
            log.warning("configmap %s/%s not updated: %s", namespace, name, failed)
            return
        log.info("updated %s/%s: %s", namespace, name, data[rescheduling.RESET_DATA_KEY])
