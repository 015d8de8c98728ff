"""Monitoring as code: the alert rules pass the real promtool's check and its unit tests (each
alert fires when it should and stays silent when it should not), every PromQL query of the rules
and of the Grafana dashboard parses and names only series the components really expose (read
from their own /metrics, each run as a process), and the chart installs PodMonitors, the
PrometheusRule and the dashboard ConfigMap behind switches that follow the Prometheus
Operator's API."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from contract.deviceinfo import DeviceInfo
from simulation.cluster import state_file, vnpu_state_file, wait_for
from simulation.dra_cluster import dra_node_object, driver_command
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster, pod_object, put_npu_node
from simulation.processes import free_port, scheduler_process
from testbed.control_plane import binary
from testbed.manifests import CHART, KUBE_VERSION, MANIFESTS, RELEASE, kustomize
from tests.integration.test_agent_cli import serve
from tests.unit.test_docs_links import anchors

ROOT = Path(__file__).parents[2]
RULES = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
RULE_TESTS = ROOT / "monitoring" / "prometheus-rules.test.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"
OPERATOR_API = "monitoring.coreos.com/v1"
# Prometheus' own series (https://prometheus.io/docs/concepts/jobs_instances/).
PROMETHEUS_OWN = {"up"}


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary("promtool")), *args], capture_output=True, text=True, check=False, cwd=cwd
    )


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


# Grafana's variables as a query may hold them, replaced by what Prometheus would be sent.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$node": ".+"}


def as_sent(query: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        query = query.replace(variable, value)
    assert "$" not in query, f"a Grafana variable this test does not know: {query}"
    return query


# What of a PromQL expression is not a series name: strings, label matchers, ranges, the label
# lists of grouping and vector matching, keywords (prometheus/prometheus promql/parser/lex.go).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"and", "or", "unless", "offset", "bool", "atan2", "inf", "nan", "by", "without"}
_NAME = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()")


def series_names(query: str) -> set[str]:
    """The series a PromQL expression selects by name (functions and keywords left out)."""
    text = _STRING.sub('""', query)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _LISTS.sub(" ", text)
    return {n for n in _NAME.findall(text) if n.lower() not in _KEYWORDS}


def test_series_names_reads_names_not_functions_labels_or_durations() -> None:
    query = (
        'histogram_quantile(0.99, sum by (le, verb) (rate(a_bucket{verb=~"f.*"}[5m]))) '
        "> on (instance) group_left (x) b_total and c offset 5m or absent(d == 1)"
    )
    assert series_names(query) == {"a_bucket", "b_total", "c", "d"}


def test_the_rules_pass_promtools_check() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_each_alert_fires_and_stays_silent_in_promtools_unit_tests() -> None:
    done = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = {r["alert"] for r in rules()}
    assert alerts - fired == set(), "an alert no test sees fire"
    assert alerts - silent == set(), "an alert no test sees stay silent"


def test_each_alert_has_severity_summary_description_and_a_runbook_heading() -> None:
    headings = anchors(OPERATIONS)
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(annotations), rule["alert"]
        page, anchor = annotations["runbook"].split("#")
        assert ROOT / page == OPERATIONS and anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in headings, f"docs/operations.md has no heading {rule['alert']}"


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    queries = dashboard_queries()
    recorded = [
        {"record": f"dashboard:query_{i}", "expr": as_sent(q)} for i, q in enumerate(queries)
    ]
    (tmp_path / "queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]})
    )
    done = promtool("check", "rules", str(tmp_path / "queries.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(queries)} rules found" in done.stdout


def test_the_dashboard_is_grafana_39_on_a_chosen_prometheus() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39 and board["uid"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids repeat"
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for source in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert source == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    titles = " | ".join(p["title"] for p in panels)
    for shown in ("Cluster NPU chips", "Fragmentation", "Chips per node", "Faults", "Leader"):
        assert shown in titles


# -- The series the components expose: each run as a process, its /metrics read ----------


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, ""
    except OSError:
        return 0, ""


Exposed = dict[str, set[tuple[str, str]]]  # series name → the label pairs its samples carry


def names_in(exposition: str) -> Exposed:
    """Every series name an exposition offers a query, with the labels its samples carry: the
    samples' names, and each family's as Prometheus stores it (a counter's _total; a
    histogram's _bucket, _sum and _count) even while it has no sample yet."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    found: Exposed = {}
    for family in text_string_to_metric_families(exposition):
        for suffix in suffixes.get(family.type, ("",)):
            found.setdefault(family.name + suffix, set())
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels.items())
    return found


def scraped(url: str) -> str:
    # Each component registers its admission-policy gauge last, once started: /metrics may
    # answer before (agent/__main__.py, dra_driver/__main__.py).
    def complete() -> bool:
        status, text = get(url)
        return status == 200 and "_admission_policies_missing" in text

    assert wait_for(complete, timeout=60), f"{url} did not answer in full"
    status, text = get(url)
    assert status == 200
    return text


def scheduler_metrics(home: Path) -> str:
    store = MemoryCluster()
    info = DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=int(time.time()))
    put_npu_node(store, "n1", info)
    with scheduler_process(store, home) as service:
        return scraped(f"{service.url}/metrics")


@dataclass(frozen=True)
class RunningAgent:
    store: MemoryCluster
    kubelet: KubeletSimulator
    metrics: str  # its /metrics URL


@contextmanager
def running_agent(home: Path, state: str, *flags: str) -> Iterator[RunningAgent]:
    """``python -m agent`` as the DaemonSet runs it: with the Kubernetes API (which pod holds
    a chip), on the fake driver's ``state``, beside a kubelet simulator."""
    store = MemoryCluster()
    store.put("Node", {"metadata": {"name": "n1"}})
    api = LoopbackApiServer(store)
    api.start()
    (home / "kubeconfig").write_text(kubeconfig(api.url))
    (home / "state.yaml").write_text(state)
    kubelet = KubeletSimulator(home / "plugins", use_preferred=False)
    kubelet.start()
    port = free_port()
    process = serve(
        home / "plugins",
        home / "state.yaml",
        *flags,
        *("--kube", "kubeconfig", "--kubeconfig", str(home / "kubeconfig")),
        *("--node-name", "n1", "--allow-missing-policies"),
        *("--metrics-listen", f"127.0.0.1:{port}"),
    )
    try:
        yield RunningAgent(store, kubelet, f"http://127.0.0.1:{port}/metrics")
    finally:
        process.terminate()
        process.wait(timeout=30)
        kubelet.close()
        api.stop()


def agent_metrics(home: Path) -> str:
    """A 910 node's agent after it gave a pod two chips (one chip unhealthy)."""
    with running_agent(home, state_file(unhealthy=(3,))) as agent:
        kubelet = agent.kubelet
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/Ascend910") == 7, 60)
        chosen = {"huawei.com/Ascend910": "Ascend910-6,Ascend910-7", "predicate-time": "1"}
        agent.store.put("Pod", pod_object("ns", "p", "n1", 2, annotations=chosen))
        kubelet.allocate("ns/p", "main", "huawei.com/Ascend910", 2)
        return scraped(agent.metrics)


def vnpu_agent_metrics(home: Path) -> str:
    """The agent of a dynamic-vNPU node (310P, AI cores cut on demand): its AI-core series."""
    flags = ("-presetVirtualDevice=false", "-volcanoType=true")
    with running_agent(home, vnpu_state_file(), *flags) as agent:
        url = agent.metrics
        assert wait_for(lambda: "ascend_agent_vnpu_aicores{" in get(url)[1], timeout=60)
        return scraped(url)


def dra_driver_metrics(home: Path) -> str:
    store = MemoryCluster()
    store.put("Node", dra_node_object("node-00", 0))
    api = LoopbackApiServer(store)
    api.start()
    (home / "state.yaml").write_text(state_file())
    (home / "kubeconfig").write_text(kubeconfig(api.url))
    port = free_port()
    command = driver_command("node-00", home, kubeconfig_file=home / "kubeconfig")
    with (home / "driver.log").open("wb") as log:
        driver = subprocess.Popen([*command, f"--metrics-listen=127.0.0.1:{port}"], stderr=log)
    try:
        return scraped(f"http://127.0.0.1:{port}/metrics")
    finally:
        driver.terminate()
        driver.wait(timeout=30)
        api.stop()


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exposed]:
    """The series the agent, the scheduler service and the DRA driver expose."""
    home = Path(tmp_path_factory.mktemp("exposed", numbered=True))
    # Socket paths must stay under 107 bytes: the agent's and the driver's live under /tmp.
    short = Path(tempfile.mkdtemp(prefix="mon", dir="/tmp"))
    try:
        (short / "agent").mkdir()
        (short / "vnpu").mkdir()
        (short / "dra").mkdir()
        found: Exposed = {}
        for each in (
            names_in(scheduler_metrics(home)),
            names_in(agent_metrics(short / "agent")),
            names_in(vnpu_agent_metrics(short / "vnpu")),
            names_in(dra_driver_metrics(short / "dra")),
        ):
            for name, labels in each.items():
                found.setdefault(name, set()).update(labels)
        yield found
    finally:
        shutil.rmtree(short, ignore_errors=True)


# A selector's equality matchers: name{label="value", ...}.
_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
_EQUALS = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def test_matchers_reads_only_equality_matchers() -> None:
    query = 'a{state="held", node=~"$node"} and b{reason!="x"} + c{kind = "vnpu"}'
    assert matchers(query) == {("a", "state", "held"), ("c", "kind", "vnpu")}


def matchers(query: str) -> set[tuple[str, str, str]]:
    """The (series, label, value) of each equality matcher of a PromQL expression."""
    return {
        (name, label, value)
        for name, inside in _SELECTOR.findall(query)
        for label, value in _EQUALS.findall(re.sub(r'\w+\s*(?:!=|=~|!~)\s*"[^"]*"', "", inside))
    }


@pytest.mark.parametrize("where", ["rules", "dashboard"])
def test_every_series_queried_is_one_a_component_exposes(where: str, exposed: Exposed) -> None:
    if where == "rules":
        queries = [str(r["expr"]) for r in rules()]
    else:
        board = dashboard()
        queries = dashboard_queries() + [
            re.sub(r"label_values\((\w+),.*", r"\1", v["definition"])
            for v in board["templating"]["list"]
            if v["type"] == "query"
        ]
    named = {n for q in queries for n in series_names(q)} - PROMETHEUS_OWN
    assert named, "no series found: the name reader is broken"
    assert sorted(named - set(exposed)) == []
    # A label value a query picks (state="held", reason="deviceinfo_stale") is one written.
    picked = {m for q in queries for m in matchers(q) if m[0] not in PROMETHEUS_OWN}
    assert sorted(m for m in picked if (m[1], m[2]) not in exposed[m[0]]) == []


# -- The chart: switches, and the objects it renders --------------------------------------


def rendered(*values: str, api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    command = [str(binary("helm")), "template", RELEASE, str(CHART), "--namespace", "npu"]
    command += ["--kube-version", KUBE_VERSION]
    for version in api_versions:
        command += ["--api-versions", version]
    for value in values:
        command += ["--set", value]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def monitoring_objects(documents: list[dict[str, Any]]) -> set[str]:
    return {
        f"{d['kind']}/{d['metadata']['name']}"
        for d in documents
        if d["kind"] in ("PodMonitor", "PrometheusRule")
        or d["metadata"].get("labels", {}).get("grafana_dashboard")
    }


ALL = {
    "PodMonitor/ascend-npu-agent",
    "PodMonitor/ascend-npu-scheduler",
    "PrometheusRule/ascend-npu",
    "ConfigMap/ascend-npu-dashboard",
}


def test_the_switches_install_when_the_operators_api_is_served_or_when_told() -> None:
    assert monitoring_objects(rendered()) == set(), "auto, without the Operator: nothing"
    assert monitoring_objects(rendered(api_versions=(OPERATOR_API,))) == ALL
    told = rendered(
        "monitoring.podMonitors=true",
        "monitoring.prometheusRule=true",
        "monitoring.grafanaDashboard=true",
        "dra.enabled=true",
    )
    assert monitoring_objects(told) == ALL | {"PodMonitor/ascend-npu-dra-driver"}
    off = rendered(
        "monitoring.podMonitors=false",
        "monitoring.grafanaDashboard=false",
        api_versions=(OPERATOR_API,),
    )
    assert monitoring_objects(off) == {"PrometheusRule/ascend-npu"}


def test_the_labels_a_prometheus_selects_by_go_on_the_monitors_and_the_rule() -> None:
    documents = rendered("monitoring.labels.release=kps", api_versions=(OPERATOR_API,))
    selected = {
        f"{d['kind']}/{d['metadata']['name']}"
        for d in documents
        if d["metadata"]["labels"].get("release") == "kps"
    }
    assert selected == ALL - {"ConfigMap/ascend-npu-dashboard"}


def test_the_schema_refuses_a_switch_that_is_not_auto_true_or_false() -> None:
    command = [str(binary("helm")), "template", RELEASE, str(CHART)]
    done = subprocess.run(
        [*command, "--set", "monitoring.podMonitors=yes"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "/monitoring/podMonitors" in done.stderr


# The fields prometheus-operator's CRDs define for what the chart writes (a subset), from
# prometheus-operator/prometheus-operator example/prometheus-operator-crd/
# monitoring.coreos.com_podmonitors.yaml (v0.91) and monitoring.coreos.com_prometheusrules.yaml
# (v0.82).
PODMONITOR_SPEC = {
    "jobLabel", "podTargetLabels", "podMetricsEndpoints", "selector", "namespaceSelector",
    "sampleLimit", "targetLimit", "labelLimit", "attachMetadata", "scrapeClass",
}  # fmt: skip
POD_METRICS_ENDPOINT = {
    "port", "portNumber", "targetPort", "path", "scheme", "params", "interval",
    "scrapeTimeout", "honorLabels", "honorTimestamps", "relabelings", "metricRelabelings",
    "enableHttp2", "followRedirects", "filterRunning", "tlsConfig", "authorization",
    "basicAuth", "oauth2", "proxyUrl",
}  # fmt: skip
RELABEL = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
RULE_GROUP = {"name", "interval", "rules", "limit", "labels", "partial_response_strategy",
              "query_offset"}  # fmt: skip
RULE = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def pod_templates(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"] for d in documents if d["kind"] in ("DaemonSet", "Deployment")]


def test_each_podmonitor_selects_its_components_pods_by_their_metrics_port() -> None:
    documents = rendered("dra.enabled=true", api_versions=(OPERATOR_API,))
    monitors = {d["metadata"]["name"]: d for d in documents if d["kind"] == "PodMonitor"}
    expected = {
        "ascend-npu-agent": {"ascend-npu-agent", "ascend-npu-agent-vnpu"},
        "ascend-npu-scheduler": {"ascend-npu-scheduler"},
        "ascend-npu-dra-driver": {"ascend-npu-dra-driver"},
    }
    assert set(monitors) == set(expected)
    for name, monitor in monitors.items():
        assert monitor["apiVersion"] == OPERATOR_API
        assert monitor["metadata"]["namespace"] == "npu"
        spec = monitor["spec"]
        assert set(spec) <= PODMONITOR_SPEC, name
        assert spec["jobLabel"] == "app.kubernetes.io/name"  # the rules' job names
        wanted = spec["selector"]["matchLabels"]
        chosen = [
            t for t in pod_templates(documents) if wanted.items() <= t["metadata"]["labels"].items()
        ]
        assert {t["metadata"]["labels"]["app.kubernetes.io/name"] for t in chosen} == (
            expected[name]
        )
        for endpoint in spec["podMetricsEndpoints"]:
            assert set(endpoint) <= POD_METRICS_ENDPOINT, name
            for relabel in endpoint.get("relabelings", []):
                assert set(relabel) <= RELABEL, name
            for template in chosen:
                ports = {
                    p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])
                }
                assert endpoint["port"] in ports, name


def test_the_prometheus_rule_is_the_rule_file_in_the_operators_fields() -> None:
    (rule,) = [d for d in rendered(api_versions=(OPERATOR_API,)) if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == OPERATOR_API
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    for group in rule["spec"]["groups"]:
        assert set(group) <= RULE_GROUP
        for each in group["rules"]:
            assert set(each) <= RULE and "expr" in each
            assert DURATION.match(each.get("for", "0")), each["alert"]
            assert all(isinstance(v, str) for v in each["annotations"].values())


def test_the_dashboard_configmap_carries_the_dashboard_for_grafanas_sidecar() -> None:
    (config,) = [
        d
        for d in rendered(
            "monitoring.grafanaDashboard=true", "monitoring.dashboardNamespace=grafana"
        )
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ascend-npu-dashboard"
    ]
    kubernetes_validate.validate(config, "1.33", strict=True)
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["namespace"] == "grafana"
    assert json.loads(config["data"]["ascend-npu.json"]) == dashboard()


def test_the_kustomize_monitoring_folder_holds_the_same_objects() -> None:
    built = kustomize(MANIFESTS / "monitoring")
    assert monitoring_objects(built) == ALL | {"PodMonitor/ascend-npu-dra-driver"}
