"""``python -m scheduler_core``: the placement engine from a shell.

``place`` reads a JSON request on stdin and prints the decision; ``demo`` places a small
mixed workload on an example cluster and draws the rings.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import ssl
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from chip_topology.diagram import ring_diagram
from chip_topology.routing import product_by_name
from contract import deviceinfo
from contract.chip_names import InvalidInput
from contract.pods import pod_view
from infra import config
from infra.cli import (
    add_version,
    bool_flag,
    exit_on_bind_error,
    float_above,
    float_at_least,
    float_between,
    int_at_least,
    listen_address,
    listen_address_or_off,
    name_list,
    wait_until,
)
from infra.config import CommandParser
from infra.http import tls_context
from infra.kube import policies
from infra.kube.client import KubernetesGateway
from infra.kube.location import MODES, kubeconfig_for
from infra.kube.port import KubeError, NotFound, Selection, list_all
from infra.leader import Timing
from infra.logs import configure, log_level
from scheduler_core import fault_source, init_params
from scheduler_core.engine import locality, rescheduling
from scheduler_core.engine.model import Job, NodeState, Task
from scheduler_core.engine.policies import DEFAULT_POLICY, POLICIES, policy_by_name
from scheduler_core.engine.session import Session
from scheduler_core.init_params import BadLocation, InitParams, Location
from scheduler_core.request_json import (
    JOB_KEYS,
    NODE_KEYS,
    REQUEST_KEYS,
    TASK_KEYS,
    decision_to_json,
    parse_request,
)
from scheduler_core.service.access import Access
from scheduler_core.service.election import Election, PodRef
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.state import live_view
from scheduler_core.service.state.holds import DEFAULT_HOLD_SHARE
from scheduler_core.service.verbs.extender import DEFAULT_PROFILES, Extender
from scheduler_core.service.views.status import cluster_json, cluster_lines

EXIT_BAD_INPUT = 2
ENV_PREFIX = "ASCEND_SCHEDULER_"
EXIT_NO_FIT = 1  # place: the answer is printed, and says why nothing fits

PLACE_HELP = f"""\
input (stdin), one request:
  {{"nodes": [{{"name": "n1", "product": "module910x8", "allocatable": 8,
              "free": ["Ascend910-0", "Ascend910-4", "Ascend910-5"],
              "unhealthy": [], "network_unhealthy": []}}],
   "job": {{"name": "train", "product": "module910x8",
           "tasks": [{{"name": "train-0", "npu": 2}}]}}}}
  keys (any other is refused):
    request  {", ".join(REQUEST_KEYS)}
    node     {", ".join(NODE_KEYS)}
    job      {", ".join(JOB_KEYS)}
    task     {", ".join(TASK_KEYS)}

output (stdout), one decision:
  {{"feasible": true, "placements": [{{"task": "train-0", "node": "n1",
   "chips": ["Ascend910-4", "Ascend910-5"]}}], "scores": {{"n1": 261.0}}, "rejected": {{}}}}
  or {{"feasible": false, "reason": "...", "rejected": {{"n1": "..."}}}}

exit codes:
  0  the job fits: the placements are printed
  {EXIT_NO_FIT}  nothing fits: the decision is printed with the reason
  {EXIT_BAD_INPUT}  bad input or flags: one line on stderr names the field, nothing on stdout
"""


def _place(policy_name: str) -> int:
    try:
        request = parse_request(sys.stdin.read())
        session = Session(request.nodes, policy_by_name(policy_name))
    except InvalidInput as bad:
        print(f"error: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    decision = session.place(request.job, explain=True)
    kind = product_by_name(request.job.product).kind
    print(json.dumps(decision_to_json(decision, kind)))
    return 0 if decision.feasible else EXIT_NO_FIT


def _demo_cluster() -> list[NodeState]:
    full = tuple(range(8))
    return [
        NodeState("node-a", "module910x8", full, 8),
        NodeState("node-b", "module910x8", full, 8),
        NodeState("node-c", "module910x8", (0, 1, 2, 4, 5, 6, 7), 7, unhealthy=frozenset({3})),
        NodeState("node-d", "module910x8", full, 8),
        NodeState("node-e", "module910x8", full, 8),
    ]


def _demo_jobs() -> list[Job]:
    sizes = [
        ("train-1", 1),
        ("train-2", 2),
        ("infer-1", 1),
        ("train-4", 4),
        ("debug-1", 1),
        ("train-2b", 2),
        ("train-8", 8),
    ]
    jobs = [Job(name, "module910x8", (Task(f"{name}-0", n),)) for name, n in sizes]
    jobs.append(Job("gang-16", "module910x8", (Task("gang-16-0", 8), Task("gang-16-1", 8))))
    return jobs


def _demo(policy_name: str) -> int:
    session = Session(_demo_cluster(), policy_by_name(policy_name))
    product = product_by_name("module910x8")
    print(f"policy {policy_name}: rings [0-3|4-7], '.' free, '#' held, 'x' unhealthy")
    for job in _demo_jobs():
        decision = session.place(job)
        if decision.feasible:
            where = ", ".join(f"{p.node}:{','.join(p.chip_names)}" for p in decision.placements)
            print(f"  {job.name:9} ({sum(t.npu for t in job.tasks):2} chips) -> {where}")
        else:
            print(f"  {job.name:9} cannot be placed: {decision.reason}")
    for name, node in session.nodes.items():
        drawing, _ = ring_diagram(product, session.usable(name), node.unhealthy)
        print(f"  {name}  {drawing}")
    return 0


def _access(args: argparse.Namespace) -> Access:
    """Who may call the verbs, from the TLS, client and token flags (ValueError names what is
    wrong or missing): no authentication mode, or a token over plain HTTP, only with
    ``--insecure``."""
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    if args.client_ca_file is not None and args.tls_cert_file is None:
        raise ValueError("--client-ca-file needs --tls-cert-file (client certificates are TLS)")
    if (args.client_ca_file is None) != (not args.client_allowed_names):
        raise ValueError(
            "--client-ca-file and --client-allowed-names go together (the CA, and the CNs of "
            "its certificates let in, e.g. ascend-npu-kube-scheduler)"
        )
    tls = None
    if args.tls_cert_file is not None:
        try:
            tls = tls_context(args.tls_cert_file, args.tls_private_key_file, args.client_ca_file)
        except (OSError, ssl.SSLError) as bad:
            raise ValueError(f"TLS files: {bad}") from None
    token = None
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip()
        except OSError as bad:
            raise ValueError(f"--token-file: {bad.strerror}") from None
        if not token:
            raise ValueError(f"--token-file {args.token_file} is empty")
        if tls is None and not args.insecure:
            raise ValueError(
                "--token-file needs TLS (--tls-cert-file, --tls-private-key-file): over plain "
                "HTTP the token can be read on the way (--insecure to allow it)"
            )
    access = Access(tls, args.client_allowed_names, token)
    if access.open and not args.insecure:
        raise ValueError(
            "the verbs need an authentication mode: --client-ca-file with "
            "--client-allowed-names, or --token-file (with TLS); --insecure serves them to "
            "anyone who reaches the port"
        )
    return access


def _serve(args: argparse.Namespace) -> int:
    configure(args.log_level, args.log_format == "json")
    try:
        _check_addresses(args.listen, args.metrics_listen)
        if not args.scheduler_names:
            raise ValueError("--scheduler-names is empty: name the schedulers whose pods it places")
        access = _access(args)
        election = _election(args)
        # Not a drop-in for a binary of Huawei's: refuses without its policies unless told.
        require = policies.required(args, by_default=True)
        gateway = KubernetesGateway.from_environment(kubeconfig_for(args.kube, args.kubeconfig))
        _settle(args, _volcano_init_params(gateway, args.volcano_config))
    except (KubeError, ValueError) as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    gone, refusal = policies.check(gateway, policies.SCHEDULER_POLICIES, not require)
    # A source in mindx-dl it may not list would leave it never ready: refused at start.
    refusal = refusal or fault_source.refusal(gateway, args.cluster_info_manager, args.noded)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if access.open or (access.token is not None and access.tls is None):  # --insecure
        logging.getLogger("scheduler_core").warning(
            "INSECURE (--insecure): %s",
            "the verbs and /debug/compare are open to anyone who reaches the port"
            if access.open
            else "the token is accepted over plain HTTP",
        )
    extender = Extender(
        gateway,
        policy_by_name(args.policy),
        gang_ttl=args.gang_ttl,
        hold_limit=args.hold_limit,
        hold_share=args.hold_share_per_namespace,
        network=locality.Settings(
            args.nslb_version,
            args.shared_tor_num,
            args.reserve_nodes,
            args.super_pod_size,
            args.prefer_previous_node,
        ),
        grace_over=args.grace_over_time,
        profiles=args.scheduler_names,
        filter_best=args.filter_answers == "best",
    )
    service = SchedulerService(
        gateway,
        extender,
        args.refresh_period,
        args.self_maintain,
        election=election,
        npu_map=args.npu_map,
        noded=args.noded,
        clusterd=args.cluster_info_manager,
        force_enqueue=args.force_enqueue,
    )
    watch = policies.PolicyWatch(
        gateway, policies.SCHEDULER_POLICIES, gone, args.policies_recheck_period
    )
    watch.report(service.metrics.registry, "ascend_scheduler")
    fault_source.report(service.metrics.registry, args.cluster_info_manager, args.noded)
    stop = threading.Event()
    watch.start(stop)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with exit_on_bind_error({"--listen": args.listen, "--metrics-listen": args.metrics_listen}):
        host, port = args.listen
        url = service.start(host, port, access, args.metrics_listen)
    logging.getLogger("scheduler_core").info("serving the extender on %s", url)
    wait_until(stop)
    service.stop()
    return 0


# Huawei's Volcano plugin settings (``init-params``) that are flags here: the flag's name.
FROM_VOLCANO = {
    "grace_over_time": "grace-over-time",
    "nslb_version": "nslb-version",
    "shared_tor_num": "shared-tor-num",
    "super_pod_size": "super-pod-size",
    "reserve_nodes": "reserve-nodes",
    "self_maintain": "self-maintain-available-card",
    "cluster_info_manager": "use-cluster-info-manager",
    "force_enqueue": "force-enqueue",
    "prefer_previous_node": "prefer-previous-node",
}


def _volcano_init_params(gateway: KubernetesGateway, where: Location | None) -> InitParams:
    """Volcano's ``init-params`` from its scheduler ConfigMap, read once (none without
    ``--volcano-config``; a ConfigMap not there: Volcano's defaults, with a warning).
    ValueError names what cannot be read."""
    if where is None:
        return InitParams()
    log = logging.getLogger("scheduler_core")
    try:
        configmap = gateway.get_configmap(where.namespace, where.name)
    except NotFound:
        log.warning("--volcano-config %s: no such ConfigMap; no init-params read", where)
        return InitParams()
    except KubeError as failed:
        raise ValueError(f"--volcano-config {where}: {failed}") from None
    text = (configmap.get("data") or {}).get(where.key)
    if not isinstance(text, str):
        raise ValueError(f"--volcano-config {where}: the ConfigMap has no key {where.key!r}")
    try:
        params = init_params.from_configuration(text)
    except ValueError as bad:
        raise ValueError(f"--volcano-config {where}: {bad}") from None
    for warning in params.warnings:  # as upstream logs a bad value, and takes its default
        log.warning("--volcano-config %s: init-params %s", where, warning)
    for key in init_params.NOT_SCHEDULED:
        if key in params.values:
            log.warning(
                "--volcano-config %s: init-params %s is not read here (docs/compatibility.md)",
                where,
                key,
            )
    return params


def _settle(args: argparse.Namespace, params: InitParams) -> None:
    """Each setting Volcano's ``init-params`` has and neither a flag nor its environment
    variable gives taken from there (over the --config file's); ``use-cluster-info-manager``
    unset: upstream's true where init-params exist, else false (no MindCluster Volcano). One
    log line says where each came from."""
    given: frozenset[str] = getattr(args, "given", frozenset())
    sources = {}
    for dest, flag in FROM_VOLCANO.items():
        if dest in given:
            sources[flag] = "flag"
        elif dest in params.values:
            setattr(args, dest, params.values[dest])
            sources[flag] = "init-params"
        else:
            sources[flag] = "default"
    if args.cluster_info_manager is None:
        args.cluster_info_manager = params.found
        sources["use-cluster-info-manager"] = "init-params" if params.found else "default"
    elif (
        params.found
        and not args.cluster_info_manager
        and params.values.get(
            "cluster_info_manager",
            True,  # upstream's: true when absent
        )
    ):
        logging.getLogger("scheduler_core").warning(
            "init-params read ClusterD (useClusterInfoManager) but --use-cluster-info-manager="
            "false: faults come from DeviceInfo, ClusterD's public faults are not seen (the "
            "chart: scheduler.clusterInfoManager)"
        )
    if args.volcano_config is not None or given & FROM_VOLCANO.keys():
        logging.getLogger("scheduler_core").info(
            "Volcano plugin settings%s: %s",
            f" (init-params of {args.volcano_config})" if params.found else "",
            ", ".join(
                f"{flag} {_shown(getattr(args, dest))} ({sources[flag]})"
                for dest, flag in FROM_VOLCANO.items()
            ),
        )


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _given(
    parser: CommandParser,
    arguments: list[str],
    env_prefix: str,
    environ: Mapping[str, str] = os.environ,
) -> frozenset[str]:
    """The destinations of the settings given on the command line or in the environment:
    those Volcano's init-params do not override. The --config file's are not among them: it
    holds the installation's defaults (the chart writes every key), which a MindCluster
    user's own init-params override."""
    names = {a.split("=", 1)[0][2:] for a in arguments if a.startswith("--")}
    names |= {n for n in parser.options if env_prefix + n.upper().replace("-", "_") in environ}
    return frozenset(parser.options[n].dest for n in names if n in parser.options)


def _volcano_location(text: str) -> Location:
    try:
        return Location.parse(text)
    except BadLocation as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None


def _status(args: argparse.Namespace) -> int:
    try:
        gateway = KubernetesGateway.from_environment(kubeconfig_for(args.kube, args.kubeconfig))
        nodes, _ = list_all(gateway, Selection("Node"))
        configmaps, _ = list_all(gateway, Selection("ConfigMap", deviceinfo.NAMESPACE))
        pods = [pod_view(p) for p in list_all(gateway, Selection("Pod"))[0]]
    except (KubeError, ValueError) as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    snapshot = live_view.build(nodes, configmaps, pods, time.time(), args.self_maintain)
    if args.output == "json":
        print(json.dumps(cluster_json(snapshot, pods)))
    else:
        print("\n".join(cluster_lines(snapshot, pods)))
    return 0


def _election(args: argparse.Namespace) -> Election | None:
    if not args.leader_elect:
        return None
    timing = Timing(
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    )
    return Election(
        args.leader_elect_resource_namespace,
        args.leader_elect_resource_name,
        timing,
        pod=PodRef.from_environment(),
    )


def _check_addresses(listen: tuple[str, int], metrics: tuple[str, int] | None) -> None:
    """ValueError when both servers would bind one address: the second bind would fail
    with "address already in use" and seem to blame another process."""
    if metrics == listen and listen[1] != 0:
        raise ValueError(f"--metrics-listen {metrics[0]}:{metrics[1]} is --listen's address too")


def _shared_tor_num(text: str) -> int:
    if text not in ("1", "2"):
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or 2")
    return int(text)


def build_parser() -> CommandParser:
    parser = CommandParser(prog="python -m scheduler_core", description=__doc__)
    add_version(parser)
    for name, text, epilog in (
        ("place", "place the job of a JSON request read on stdin", PLACE_HELP),
        ("demo", "place an example workload and draw the rings", None),
        ("serve", "run the kube-scheduler extender service", None),
        ("status", "show every NPU node's chips as the scheduler sees them", None),
    ):
        command = parser.add_command(name, required=True, help=text, epilog=epilog)
        command.add_argument(
            "--policy",
            choices=sorted(POLICIES),
            default=DEFAULT_POLICY.name,
            help="huawei: Huawei's tables (compatible decisions); binpack: ring-aware best fit",
        )
    serve, status = parser.commands["serve"], parser.commands["status"]
    serve.add_argument(
        "--config",
        type=Path,
        help="YAML settings keyed by flag name (env ASCEND_SCHEDULER_<FLAG> and flags override)",
    )
    serve.add_argument(
        "--listen",
        type=listen_address,
        default="0.0.0.0:8888",
        metavar="HOST:PORT",
        help="HOST:PORT of the extender verbs (and /metrics, /healthz, /readyz)",
    )
    serve.add_argument(
        "--metrics-listen",
        type=listen_address_or_off,
        default="",
        metavar="HOST:PORT",
        help="HOST:PORT serving /metrics, /healthz and /readyz alone (besides --listen; "
        "empty: off)",
    )
    serve.add_argument("--tls-cert-file", type=Path, help="serve HTTPS with this certificate")
    serve.add_argument("--tls-private-key-file", type=Path, help="the certificate's key")
    serve.add_argument(
        "--client-ca-file",
        type=Path,
        help="the verbs take a client certificate signed by this CA whose CN is in "
        "--client-allowed-names (kube-scheduler's tlsConfig certFile/keyFile)",
    )
    serve.add_argument(
        "--client-allowed-names",
        type=name_list,
        default=frozenset(),
        metavar="CN,...",
        help="the client certificates let in: their CNs (required with --client-ca-file; as "
        "kube-apiserver's --requestheader-allowed-names, but never any)",
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        help="the verbs take the file's content as 'Authorization: Bearer <token>' or as "
        "HTTP Basic's password (Volcano: https://<user>:<token>@host in its urlPrefix); TLS only",
    )
    serve.add_argument(
        "--insecure",
        **bool_flag(False),
        help="serve without an authentication mode (anyone who reaches the port), or a token "
        "over plain HTTP; refused otherwise",
    )
    policies.add_flag(serve, required_by_default=True)
    serve.add_argument(
        "--scheduler-names",
        type=name_list,
        default=",".join(sorted(DEFAULT_PROFILES)),
        metavar="NAME,...",
        help="the schedulers (spec.schedulerName) whose pods /bind binds and Volcano's "
        "allocateFunc annotates",
    )
    for command in (serve, status):
        command.add_argument(
            "--kube",
            choices=MODES,
            default="auto",
            help="auto: --kubeconfig, $KUBECONFIG, ~/.kube/config, else in-cluster (as kubectl)",
        )
        command.add_argument("--kubeconfig", type=Path, help="kubeconfig file (--kube auto)")
        command.add_argument(
            "--self-maintain-available-card",
            dest="self_maintain",
            **bool_flag(True),
            help="compute free chips from pods (true) or trust the agents' published lists",
        )
    serve.add_argument(
        "--refresh-period",
        type=float_above(0),
        default=1.0,
        help="seconds between reads of nodes, DeviceInfo and pods",
    )
    serve.add_argument(
        "--leader-elect",
        **bool_flag(False),
        help="elect one leader among the replicas on a Lease; only it answers the verbs",
    )
    # At least a second each, as the client's leader election takes them (infra/leader.py).
    serve.add_argument(
        "--leader-elect-lease-duration",
        type=float_at_least(1),
        default=15.0,
        help="seconds a leader's Lease lasts unrenewed",
    )
    serve.add_argument(
        "--leader-elect-renew-deadline",
        type=float_at_least(1),
        default=10.0,
        help="seconds the leader tries to renew before it steps down",
    )
    serve.add_argument(
        "--leader-elect-retry-period",
        type=float_at_least(1),
        default=2.0,
        help="seconds between tries to acquire or renew the Lease",
    )
    serve.add_argument(
        "--leader-elect-resource-name", default="ascend-npu-scheduler", help="the Lease's name"
    )
    serve.add_argument(
        "--leader-elect-resource-namespace", default="kube-system", help="the Lease's namespace"
    )
    serve.add_argument(
        "--gang-ttl",
        type=float_above(0),
        default=60.0,
        help=(
            "seconds a gang reservation waits for its pods to bind; a gang partly running "
            "this long whose rest cannot be placed is restarted whole"
        ),
    )
    serve.add_argument(
        "--hold-limit",
        type=float_at_least(0),
        default=600.0,
        help=(
            "seconds chips may be held back from one-pod jobs for a waiting gang (a gang "
            "whose size a Volcano or coscheduling PodGroup states)"
        ),
    )
    serve.add_argument(
        "--hold-share-per-namespace",
        type=float_between(0, 1),
        default=DEFAULT_HOLD_SHARE,
        help=(
            "the share of the cluster's chips one namespace's waiting gangs may hold "
            "together, and all namespaces' together; each held node counts as its whole "
            "server (0: none)"
        ),
    )
    serve.add_argument(
        "--nslb-version",
        choices=locality.NSLB_VERSIONS,
        default="1.0",
        help="switch affinity: 1.0 (whole and logical ToRs) or 2.0 (shared ToRs)",
    )
    serve.add_argument(
        "--shared-tor-num",
        type=_shared_tor_num,
        default=2,
        help="switch affinity 2.0: shared ToRs one job may use (1 or 2)",
    )
    # At least 1: upstream reads 0 or less as "unset" (scheduler_core/engine/superpod.py), so a
    # 0 or -3 written here would silently be the defaults.
    serve.add_argument(
        "--reserve-nodes",
        type=int_at_least(1),
        default=2,
        help="nodes of each SuperPoD kept spare for faults until needed",
    )
    serve.add_argument(
        "--super-pod-size",
        type=int_at_least(1),
        default=48,
        help="nodes of a physical SuperPoD (an sp-block may not be larger)",
    )
    serve.add_argument(
        "--grace-over-time",
        type=float_at_least(0),
        default=rescheduling.GRACE_OVER_TIME,
        help="seconds a grace-rescheduled job's pods get before they are deleted at once",
    )
    serve.add_argument(
        "--npu-map",
        **bool_flag(False),
        help="serve the live NPU map (GET /map) on --listen, behind the verbs' authentication",
    )
    # Off by default: NodeD's namespace (mindx-dl) exists only where MindCluster is installed.
    serve.add_argument(
        "--noded",
        **bool_flag(False),
        help=(
            "read NodeD's mindx-dl/mindx-dl-nodeinfo-<node>: a node it reports UnHealthy is "
            "left out, PreSeparate takes no new pods"
        ),
    )
    serve.add_argument(
        "--volcano-config",
        type=_volcano_location,
        metavar="NAMESPACE/NAME[:KEY]",
        help="Volcano's scheduler ConfigMap (key: volcano-scheduler.conf), read once at start: "
        "the settings of Huawei's plugin in its init-params that no flag gives",
    )
    serve.add_argument(
        "--use-cluster-info-manager",
        dest="cluster_info_manager",
        **bool_flag(None),
        help="read faults from ClusterD's mindx-dl/cluster-info-* ConfigMaps instead of the "
        "DeviceInfo and NodeD ConfigMaps (Volcano's useClusterInfoManager; unset: true where "
        "--volcano-config's configuration has init-params, as upstream, else false)",
    )
    serve.add_argument(
        "--force-enqueue",
        **bool_flag(True),
        help="Volcano's jobEnqueueable permits an NPU job the nodes have room for (false: "
        "abstains, leaving it to Volcano's other plugins); one they have no room for is "
        "rejected either way",
    )
    serve.add_argument(
        "--filter-answers",
        choices=["best", "all"],
        default="best",
        help="kube-scheduler's /filter passes only the nodes of the best score (best: "
        "configure no prioritizeVerb, a round trip less per pod) or every fitting node (all: "
        "with prioritizeVerb, its other scores weighed against ours)",
    )
    serve.add_argument(
        "--prefer-previous-node",
        **bool_flag(False),
        help="a pod-level fault job's ranks whose node did not fail go back to it first",
    )
    serve.add_argument(
        "--log-level", type=log_level, default="info", help="debug, info, warning, error, critical"
    )
    status.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="output format"
    )
    serve.add_argument(
        "--log-format", choices=["text", "json"], default="json", help="log line format"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    given: frozenset[str] = frozenset()
    if arguments[:1] == ["serve"]:
        try:
            serve = parser.commands["serve"]
            given = _given(serve, arguments[1:], ENV_PREFIX)
            arguments = ["serve", *config.arguments(serve, arguments[1:], ENV_PREFIX)]
        except config.ConfigError as bad:
            print(f"error: {bad}", file=sys.stderr)
            return EXIT_BAD_INPUT
    args = parser.parse_args(arguments)
    if args.command == "serve":
        args.given = given
    if args.command == "place":
        return _place(args.policy)
    if args.command == "serve":
        return _serve(args)
    if args.command == "status":
        return _status(args)
    return _demo(args.policy)


if __name__ == "__main__":
    sys.exit(main())
