"""The DRA driver's Prometheus metrics and health endpoints (``--metrics-listen HOST:PORT``).

Named as the agent's and the scheduler's are (``ascend_<component>_…``, counters ending in
``_total``, units in the name: Prometheus's naming rules,
https://prometheus.io/docs/practices/naming/), with the build's version as an info metric
that is always 1, as Prometheus's own ``prometheus_build_info``:

- ``ascend_npu_build_info{component="dra-driver",version}`` 1;
- ``ascend_dra_driver_prepares_total{result}`` and ``…_unprepares_total{result}``: claims
  the kubelet asked for, ``result`` ``success`` or ``error``;
- ``ascend_dra_driver_prepare_failures_total{reason}``: claims not prepared, by the bounded
  reason of ``claims.FAILURE_REASONS`` (``invalid_claim``, ``not_found``, ``api_error``,
  ``unhealthy``, ``taken``, ``checkpoint``);
- ``ascend_dra_driver_slice_writes_total``, ``…_slice_write_failures_total``: writes of the
  node's ResourceSlice, and publication passes the API server failed;
- ``ascend_dra_driver_watch_errors_total``, ``…_loop_errors_total{loop}``: list and watch
  calls that failed (each retried after a backoff), unexpected failures a loop survived;
- ``ascend_dra_driver_registration_refusals_total``: registrations the kubelet refused;
- ``ascend_dra_driver_published_devices``: devices in the node's ResourceSlice as the API
  server stores it (0 while there is none); ``ascend_dra_driver_chips{health}``;
  ``ascend_dra_driver_prepared_claims``.

``/healthz``: the process answers. ``/readyz``: 200 ``ready``, or 503 with the reason
(``driver.why_not_ready``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from chip_drivers.chips import NodeChips
from dra_driver.claims import FAILURE_REASONS
from infra.metrics import Counter, Family, build_info, exposition, owned, registry

COMPONENT = "dra-driver"
PREFIX = "ascend_dra_driver"
RESULTS = ("success", "error")


@dataclass(frozen=True, slots=True)
class Readings:
    """What the driver's parts keep themselves, read at each scrape."""

    chips: Callable[[], NodeChips]
    prepared_claims: Callable[[], int]
    published_devices: Callable[[], int]
    slice_writes: Callable[[], int]
    slice_write_failures: Callable[[], int]
    registration_refusals: Callable[[], int]


class DraMetrics:
    def __init__(self) -> None:
        self.registry = registry()
        build_info(self.registry, COMPONENT)
        self._prepares = Counter(
            f"{PREFIX}_prepares",
            "Claims the kubelet asked to prepare, by result.",
            ["result"],
            registry=self.registry,
        )
        self._unprepares = Counter(
            f"{PREFIX}_unprepares",
            "Claims the kubelet asked to unprepare, by result.",
            ["result"],
            registry=self.registry,
        )
        for result in RESULTS:  # every result shows, at 0 until it happens
            self._prepares.labels(result)
            self._unprepares.labels(result)
        self._failures = Counter(
            f"{PREFIX}_prepare_failures",
            "Claims not prepared, by reason (a bounded set).",
            ["reason"],
            registry=self.registry,
        )
        for reason in FAILURE_REASONS:
            self._failures.labels(reason)
        self._watch_errors = Counter(
            f"{PREFIX}_watch_errors",
            "Lists and watches the API server failed (each retried after a backoff).",
            registry=self.registry,
        )
        self._loop_errors = Counter(
            f"{PREFIX}_loop_errors",
            "Unexpected failures a background loop survived, by loop.",
            ["loop"],
            registry=self.registry,
        )

    def read(self, readings: Readings) -> None:
        """Report what the parts keep (once they exist)."""
        for name, kind, help, read in (
            (
                "slice_writes",
                "counter",
                "Creates and updates of the node's ResourceSlice.",
                readings.slice_writes,
            ),
            (
                "slice_write_failures",
                "counter",
                "Publication passes of the ResourceSlice the API server failed.",
                readings.slice_write_failures,
            ),
            (
                "registration_refusals",
                "counter",
                "Registrations the kubelet refused.",
                readings.registration_refusals,
            ),
            (
                "published_devices",
                "gauge",
                "Devices in the node's ResourceSlice as the API server stores it.",
                readings.published_devices,
            ),
            ("prepared_claims", "gauge", "Claims prepared on this node.", readings.prepared_claims),
        ):
            self.registry.register(owned(f"{PREFIX}_{name}", kind, help, read))
        self.registry.register(lambda: _chips(readings.chips()))

    def prepared(self, reasons: Iterable[str]) -> None:
        """One call's claims: why each one failed ("" when prepared)."""
        for reason in reasons:
            self._prepares.labels("error" if reason else "success").inc()
            if reason:
                self._failures.labels(reason).inc()

    def unprepared(self, errors: Iterable[str]) -> None:
        for error in errors:
            self._unprepares.labels("error" if error else "success").inc()

    def watch_failed(self) -> None:
        self._watch_errors.inc()

    def loop_failed(self, loop: str) -> None:
        self._loop_errors.labels(loop).inc()

    def text(self) -> str:
        return exposition(self.registry)


def _chips(node: NodeChips) -> Iterable[Family]:
    healthy = sum(1 for chip in node.chips if chip.healthy)
    yield Family(
        f"{PREFIX}_chips",
        "gauge",
        "Chips of this node by health.",
        [
            ("", (("health", "Healthy"),), float(healthy)),
            ("", (("health", "Unhealthy"),), float(len(node.chips) - healthy)),
        ],
    )
