"""The ConfigMaps the scheduler owns (the fault record ``volcano-system/vcjob-fault-npu-cm``,
each fault job's ``fault-config-<job>``, ``volcano-system/tor-share-cm``): each written only
when its content changed since it was last written or read back, a failure logged once per
error; and the controller that keeps ``tor-share-cm`` current."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from contract.annotations import TOR_SHARE_CONFIGMAP, WRITER_LABEL
from contract.objects import Obj
from infra.kube.port import KubeError, KubeGateway, NotFound
from scheduler_core.service.state.extender_state import ExtenderState

log = logging.getLogger(__name__)


class OwnedConfigMaps:
    def __init__(self, gateway: KubeGateway) -> None:
        self._gateway = gateway
        self._written: dict[tuple[str, str], dict[str, str]] = {}
        self._errors: dict[tuple[str, str], str] = {}

    def write(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create or replace the ConfigMap, when its content changed."""
        if self._written.get((namespace, name)) == data:
            return
        # Labelled as the scheduler's: its admission policy lets it replace a job's
        # fault-config only when it made it (never a tenant's own ConfigMap of that name).
        metadata = {"namespace": namespace, "name": name, "labels": dict([WRITER_LABEL])}
        body: Obj = {"metadata": metadata, "data": data}
        try:
            try:
                self._gateway.update_configmap(body)
            except NotFound:
                self._gateway.create_configmap(body)
        except KubeError as failed:
            if self._errors.get((namespace, name)) != str(failed):
                log.warning("configmap %s/%s not written: %s", namespace, name, failed)
            self._errors[(namespace, name)] = str(failed)
            return
        self._errors.pop((namespace, name), None)
        self._written[(namespace, name)] = data

    def read_back(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        """The content found in the cluster: written already."""
        self._written[(namespace, name)] = dict(data)

    def written(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._written


class TorShare:
    """Writes ``tor-share-cm`` under switch affinity 2.0: which cross-ToR jobs run behind
    each server."""

    def __init__(self, state: ExtenderState, configmaps: OwnedConfigMaps) -> None:
        self._state = state
        self._configmaps = configmaps

    def run(self) -> None:
        shared = self._state.tor_share_data()
        if shared is not None:
            self._configmaps.write(*TOR_SHARE_CONFIGMAP, shared)
