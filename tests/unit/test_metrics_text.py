"""Our Prometheus text, read back by the client library's own parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infra.metrics import Counter, Gauge, Histogram, exposition, owned, registry
from tests.unit.helpers import metric


def test_every_kind_reads_back_as_written_with_awkward_label_values() -> None:
    of = registry()
    calls = Counter("calls", "Calls.\nBy verb.", ["verb"], registry=of)
    level = Gauge("level", "A level.", registry=of)
    wait = Histogram("wait_seconds", "Waits.", buckets=(0.1, 1.0), registry=of)
    of.register(owned("owned", "gauge", "Read at each scrape.", lambda: 7))
    awkward = 'a "quoted" \\ path\nand a line'
    calls.labels(awkward).inc(2)
    calls.labels("filter")
    level.set(3.5)
    for seconds in (0.05, 0.5, 5.0):
        wait.observe(seconds)
    text = exposition(of)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["calls"].type == "counter" and families["wait_seconds"].type == "histogram"
    assert metric(text, "calls_total", verb=awkward) == 2
    assert metric(text, "calls_total", verb="filter") == 0, "a child shows at 0 once named"
    assert metric(text, "level") == 3.5
    assert [metric(text, "wait_seconds_bucket", le=le) for le in ("0.1", "1.0", "+Inf")] == [
        1,
        2,
        3,
    ]
    assert metric(text, "wait_seconds_sum") == pytest.approx(5.55)
    assert metric(text, "owned") == 7
    assert (metric(text, "process_resident_memory_bytes") or 0) > 0
    assert of.value("calls_total", verb="filter") == 0


def test_a_counter_only_goes_up_and_labels_must_match() -> None:
    of = registry()
    calls = Counter("calls", "Calls.", ["verb"], registry=of)
    with pytest.raises(ValueError, match="labels"):
        calls.labels("a", "b")
    plain = Counter("plain", "Plain.", registry=of)
    with pytest.raises(ValueError, match="only goes up"):
        plain.inc(-1)
