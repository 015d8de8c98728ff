"""The check of the admission policies each component relies on, at start and while missing.

RBAC lets each component write more than it should (the agent its node's pods, the scheduler
ConfigMaps and pod annotations, the DRA driver ResourceSlices); the chart's
ValidatingAdmissionPolicies confine what it may change, and keep tenants off the annotations
that hand out chips. Without them the confinement silently disappears, so each component
checks at start that its policies and their bindings exist and deny (a binding whose
``validationActions`` lacks ``Deny`` only warns or audits: it counts as missing; one this
identity may not read counts too). Told ``--require-admission-policies`` (the chart and
``daemonset/`` pass it to all three) it refuses to start otherwise, exit 2. Otherwise it starts
and says so loudly: a WARNING now and at every re-read (``--policies-recheck-period``, 10 min)
while any is missing, and the gauge ``<prefix>_admission_policies_missing``, which falls to 0
once they are installed. The agent's default is to start (a drop-in under Huawei's DaemonSets,
which cannot name our flags); the scheduler's and the DRA driver's is to refuse (nothing of
Huawei's runs them). Each binding is named as its policy
(charts/ascend-npu/templates/admission-policy.yaml, dra-admission-policy.yaml); the components
may ``get`` exactly these names (the chart's RBAC).
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable, Sequence

from infra.cli import bool_flag, float_at_least
from infra.kube.port import KubeError, KubeGateway, NotFound, Obj
from infra.metrics import Registry, owned

log = logging.getLogger(__name__)

POLICY = "validatingadmissionpolicies.admissionregistration.k8s.io/v1"
BINDING = "validatingadmissionpolicybindings.admissionregistration.k8s.io/v1"

ANNOTATIONS = "ascend-npu-annotations"  # only our components write our annotations
# What each component relies on: the policies that keep tenants off the annotations it reads
# and the one confining its own identity.
AGENT_POLICIES = (ANNOTATIONS, "ascend-npu-agent-scope")
SCHEDULER_POLICIES = (ANNOTATIONS, "ascend-npu-scheduler-scope")
DRA_DRIVER_POLICIES = ("ascend-npu-claims", "ascend-npu-dra-slices")
# What each guards (the templates' comments, in a line): what is open while it is missing.
GUARDS = {
    ANNOTATIONS: "only the NPU scheduler and agent may set the pod annotations that hand out "
    "chips (huawei.com/Ascend910, predicate-time, huawei.com/AscendReal, …)",
    "ascend-npu-agent-scope": "the agent's token writes only its own node, that node's pods' "
    "annotations and its own DeviceInfo ConfigMap",
    "ascend-npu-scheduler-scope": "the scheduler's token writes only our annotations of NPU "
    "pods, its leader label and its own ConfigMaps",
    "ascend-npu-claims": "an Ascend 910 claim asks 1, 2, 4, 8 or 16 chips, 2 or 4 within one ring",
    "ascend-npu-dra-slices": "a DRA driver's token publishes only its own node's ResourceSlices",
}

REQUIRE = "--require-admission-policies"
FLAG = "--allow-missing-policies"
RECHECK = "--policies-recheck-period"
RECHECK_PERIOD = 600.0  # seconds: the re-read, and the WARNING, while a policy is missing


def add_flag(parser: argparse.ArgumentParser, *, required_by_default: bool) -> None:
    """``--require-admission-policies``, ``--allow-missing-policies`` (its opposite) and
    ``--policies-recheck-period``."""
    default = "refuse to start (exit 2)" if required_by_default else "start, warning loudly"
    parser.add_argument(
        REQUIRE,
        **bool_flag(None),
        help="refuse to start (exit 2) unless the chart's ValidatingAdmissionPolicies and their "
        f"Deny bindings are installed (default when neither this nor {FLAG} is given: "
        f"{default})",
    )
    parser.add_argument(
        FLAG,
        **bool_flag(None),
        help=f"the opposite of {REQUIRE}: start although policies are missing, with a WARNING "
        "at start and at every re-read, and the admission_policies_missing gauge",
    )
    parser.add_argument(
        RECHECK,
        type=float_at_least(1),
        default=RECHECK_PERIOD,
        metavar="SECONDS",
        help="while a policy is missing: seconds between re-reads (and WARNINGs); the gauge "
        "follows",
    )


def required(args: argparse.Namespace, by_default: bool) -> bool:
    """Whether the component refuses to start without its policies; ValueError when
    ``--require-admission-policies`` and ``--allow-missing-policies`` say both."""
    require: bool | None = args.require_admission_policies
    allow: bool | None = args.allow_missing_policies
    if require is not None and allow is not None and require == allow:
        raise ValueError(f"{REQUIRE}={require} and {FLAG}={allow} contradict each other")
    if require is not None:
        return require
    if allow is not None:
        return not allow
    return by_default


def not_enforced(name: str, policy: Obj | None, binding: Obj | None) -> str | None:
    """Why the policy ``name`` is not enforced (None: it is): absent, unbound, bound to
    another policy, or bound without ``Deny``."""
    if policy is None:
        return f"ValidatingAdmissionPolicy {name} does not exist"
    if binding is None:
        return f"ValidatingAdmissionPolicyBinding {name} does not exist"
    spec = binding.get("spec") or {}
    if spec.get("policyName") != name:
        return f"ValidatingAdmissionPolicyBinding {name} binds {spec.get('policyName')!r}"
    actions = spec.get("validationActions") or []
    if "Deny" not in actions:
        return (
            f"ValidatingAdmissionPolicyBinding {name} does not Deny (validationActions {actions})"
        )
    return None


def _get(gateway: KubeGateway, kind: str, name: str) -> Obj | None:
    try:
        return gateway.get_object(kind, "", name)
    except NotFound:
        return None


def missing(gateway: KubeGateway, names: Sequence[str]) -> list[str]:
    """What is wrong with each policy of ``names`` that is not enforced, one line each: one
    that could not be read (the API server unreachable, or this identity may not read it, as
    under Huawei's own service account) is not known to be enforced."""
    found = []
    for name in names:
        try:
            why = not_enforced(name, _get(gateway, POLICY, name), _get(gateway, BINDING, name))
        except KubeError as failed:
            why = f"ValidatingAdmissionPolicy {name} could not be read: {failed}"
        if why is not None:
            found.append(why)
    return found


def unguarded(names: Sequence[str], gone: Sequence[str]) -> str:
    """The policies of ``names`` that ``gone`` names, each with what it guards."""
    return "; ".join(
        f"{name} ({GUARDS.get(name, 'see the chart')})"
        for name in names
        if any(f" {name} " in f"{why} " for why in gone)
    )


def summary(names: Sequence[str], gone: Sequence[str]) -> str:
    """One paragraph for an Event: what is unguarded, why, and what to do."""
    return (
        f"admission policies not enforced; unguarded until they are installed: "
        f"{unguarded(names, gone)}. Why: {'; '.join(gone)}. Install the chart's "
        "ValidatingAdmissionPolicies (docs/compatibility.md, Switching from MindCluster)"
    )


def check(
    gateway: KubeGateway, names: Sequence[str], allow_missing: bool
) -> tuple[list[str], str | None]:
    """The start-up check: what is missing, and the one-line refusal (None: start). With
    ``allow_missing`` a missing policy is logged as a WARNING instead of refused."""
    gone = missing(gateway, names)
    if gone and not allow_missing:
        return gone, (
            f"refusing to start without the admission policies it relies on: {'; '.join(gone)} "
            f"(install the chart's policies, or start anyway with {FLAG})"
        )
    if gone:
        log.warning(
            "starting WITHOUT the admission policies that confine this component; unguarded "
            "until they are installed: %s. Why: %s",
            unguarded(names, gone),
            "; ".join(gone),
        )
    return gone, None


class PolicyWatch:
    """The policies ``names`` re-read every ``period`` seconds while any is missing: a
    WARNING each time, an INFO line when all are enforced (then it stops reading); ``count``
    is what the gauge shows."""

    def __init__(
        self, gateway: KubeGateway, names: Sequence[str], gone: Sequence[str], period: float
    ) -> None:
        self._gateway = gateway
        self._names = tuple(names)
        self._period = period
        self.count = len(gone)
        self._thread: threading.Thread | None = None

    def read(self) -> list[str]:
        gone = missing(self._gateway, self._names)
        self.count = len(gone)
        if gone:
            log.warning(
                "still WITHOUT the admission policies that confine this component (read again "
                "in %.0f s); unguarded: %s. Why: %s",
                self._period,
                unguarded(self._names, gone),
                "; ".join(gone),
            )
        else:
            log.info("the admission policies %s are enforced now", ", ".join(self._names))
        return gone

    def start(self, stop: threading.Event) -> None:
        """Re-read in a thread until all are enforced or ``stop`` is set (nothing to do when
        none was missing)."""
        if self.count == 0:
            return

        def run() -> None:
            while not stop.wait(self._period) and self.read():
                pass

        self._thread = threading.Thread(target=run, name="admission-policies", daemon=True)
        self._thread.start()

    def report(self, of: Registry, prefix: str) -> None:
        """The gauge ``<prefix>_admission_policies_missing``, following the re-reads."""
        _gauge(of, prefix, lambda: self.count)


def report(of: Registry, prefix: str, gone: Sequence[str]) -> None:
    """The gauge ``<prefix>_admission_policies_missing`` fixed at ``len(gone)`` (the metric
    name lists read it with none missing)."""
    count = len(gone)
    _gauge(of, prefix, lambda: count)


def _gauge(of: Registry, prefix: str, read: Callable[[], float]) -> None:
    of.register(
        owned(
            f"{prefix}_admission_policies_missing",
            "gauge",
            "Admission policies (or their Deny bindings) this component relies on that are "
            f"not enforced, or could not be read (re-read every {RECHECK} while any is).",
            read,
        )
    )
