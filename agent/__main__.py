"""``python -m agent``: the node agent (``serve``, the default) and ``devices``.

Huawei's device-plugin spellings are accepted where one exists (``-listWatchPeriod=5``,
``-volcanoType=true``, ``-useAscendDocker=true``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

# gRPC's C core logs every GOAWAY of a restarting kubelet at info level: keep errors only.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from agent import hot_reset
from agent.allocation.handshake import COMPONENT
from agent.builder import AgentConfig, KubeSettings, start_node_agent
from agent.deviceinfo_publisher import configmap, device_info
from agent.plugin_server import KUBELET_SOCKET
from agent.repair import POD_RESOURCES_SOCKET
from agent.reset_files import DATATRACE_DIR, RESET_DIR, mirrors
from chip_drivers.chips import DriverError, NodeChips
from chip_drivers.choice import driver_flags, make_driver
from chip_drivers.fake import NpuDriver
from contract.chip_names import KINDS
from contract.deviceinfo import MAX_AGE
from contract.pods import holders_by_node, pod_view
from contract.vnpu import CORE_SPECS, NPU_CORE
from infra import config
from infra.cli import (
    add_version,
    bool_flag,
    exit_on_bind_error,
    flag_bool,
    float_at_least,
    int_at_least,
    int_between,
    listen_address_or_off,
    settle,
    socket_directory,
    stop_on_signals,
    unix_socket_path,
    wait_until,
)
from infra.config import CommandParser
from infra.events import EventRecorder, ObjectRef
from infra.kube import policies
from infra.kube.location import MODES, kubeconfig_for
from infra.kube.port import KubeError, KubeGateway, Selection, list_all
from infra.logs import add_log_options
from infra.logs import configure as configure_logs

if TYPE_CHECKING:
    from infra.http import HttpServer

log = logging.getLogger("agent")

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
EXIT_BAD_INPUT = 2
POLICIES_MISSING = "NPUAdmissionPoliciesMissing"  # the Node's Event while they are
WAIT_STEP = 1.0  # seconds between reads while -deviceResetTimeout waits for chips
COMMANDS = ("serve", "devices", "deviceinfo", "status")
# The longest socket name the agent makes in --plugin-dir: one per resource it serves
# (agent/resources.py), a pre-created vNPU type the longest of them.
LONGEST_SOCKET = max(
    (
        KUBELET_SOCKET,
        f"{NPU_CORE}.sock",
        *(f"{kind.name}-{spec}.sock" for kind in KINDS.values() for spec in CORE_SPECS.values()),
    ),
    key=len,
)

# Huawei's device-plugin flags accepted for their DaemonSets' sake, with no effect here:
# (flag, Huawei's spelling, type, default, why setting it changes nothing). The ranges are
# Huawei's checkParam's (Ascend/mind-cluster component/ascend-device-plugin/main.go).
NO_EFFECT: tuple[tuple[str, str, Callable[[str], object], object, str], ...] = (
    ("--auto-stowing", "-autoStowing", flag_bool, True, "recovered chips are always free again"),
    ("--share-dev-count", "-shareDevCount", int_between(1, 100), 1, "a chip goes to one container"),
    ("--use-310p-mixed-insert", "-use310PMixedInsert", flag_bool, False, "310P is not served"),
    (
        "--linkdown-timeout",
        "-linkdownTimeout",
        int_between(1, 30),
        30,
        "link state is reported as read",
    ),
    ("--fd-flag", "-fdFlag", flag_bool, False, "the FusionDirector edge mode is not built"),
    ("--log-max-age", "-maxAge", int_between(7, 700), 7, "log files rotate by size only"),
    ("--edge-log-file", "-edgeLogFile", str, "", "the edge mode is not built"),
    (
        "--deal-watch-handler",
        "-dealWatchHandler",
        flag_bool,
        False,
        "the pod cache's reflector re-lists after any watch error already",
    ),
    (
        "--check-cached-pods",
        "-checkCachedPods",
        flag_bool,
        True,
        "the pod cache is the API server's watch alone, re-listed after a watch error",
    ),
    (
        "--enable-slow-node",
        "-enableSlowNode",
        flag_bool,
        False,
        "slow-node detection (the steptime-dtpgroup ConfigMap for CCAE) is not built",
    ),
    (
        "--soft-share-dev-config-dir",
        "-softShareDevConfigDir",
        str,
        "",
        "soft-share vNPU (vCANN-RT, -shareDevCount=100) is not built",
    ),
    (
        "--use-single-die-mode",
        "-useSingleDieMode",
        flag_bool,
        False,
        "the agent does not set the A3 multi-die policy: dies are served as the driver sets them",
    ),
    (
        "--get-pod-from-kubelet",
        "-getPodFromKubelet",
        flag_bool,
        False,
        "pods are read from the API server through one watch of this node's pods",
    ),
)
# Flags Huawei's plugin takes with two dashes (Ascend/mind-cluster
# component/ascend-common/common-utils/healthz/healthz.go RegisterFlags); Go's flag package
# takes any flag with one dash or two.
HEALTHZ_FLAGS = (
    "--enable-healthz",
    "--healthz-address",
    "--tls-cert-file",
    "--tls-private-key-file",
)


def go_spellings(argv: Sequence[str], options: Collection[str]) -> list[str]:
    """``argv`` with Huawei's flags spelled as the parser knows them: Go's flag package reads
    ``-x`` and ``--x`` alike, so ``--volcanoType=true`` is ``-volcanoType=true`` and
    ``-enable-healthz`` is ``--enable-healthz``. ``options`` are the parser's option strings."""
    spelled: list[str] = []
    for token in argv:
        name, equals, value = token.partition("=")
        if name.startswith("--") and name not in options and name[1:] in options:
            name = name[1:]
        elif not name.startswith("--") and f"-{name}" in HEALTHZ_FLAGS:
            name = f"-{name}"
        spelled.append(name + equals + value)
    return spelled


def hot_reset_mode(text: str) -> int:
    """``-hotReset``: -1 (off), 0 (inference chips) or 2 (training chips, offline), as
    upstream's checkHotResetMode (Ascend/mind-cluster component/ascend-device-plugin main.go)."""
    value = int_between(-1, 2)(text)
    if value == 1:
        raise argparse.ArgumentTypeError(
            "-hotReset=1 (online reset) was removed upstream (Ascend/mind-cluster commit "
            "40bc27dd); use 0 (inference) or 2 (training, offline)"
        )
    return value


def _heartbeat(text: str) -> float:
    value = float_at_least(1)(text)
    if value >= MAX_AGE:
        raise argparse.ArgumentTypeError(
            f"expected seconds below the {MAX_AGE} s after which schedulers ignore DeviceInfo, "
            f"got {text!r}"
        )
    return value


def build_parser() -> CommandParser:
    parser = CommandParser(prog="python -m agent", description=__doc__)
    add_version(parser, "-version")
    serve = parser.add_command("serve", help="run the device plugin (the default)")
    serve.add_argument(
        "--config",
        type=Path,
        help="YAML settings keyed by flag name (env ASCEND_AGENT_<FLAG> and flags override)",
    )
    driver_flags(serve)
    serve.add_argument(
        "--plugin-dir",
        type=socket_directory(LONGEST_SOCKET),
        default=DEFAULT_PLUGIN_DIR,
        help="the kubelet's device-plugin directory (kubelet.sock; the agent's sockets)",
    )
    serve.add_argument(
        "--list-watch-period",
        "-listWatchPeriod",
        type=int_between(3, 1800),
        default=5,
        dest="period",
        help="seconds between driver health polls (npu-smi) [3, 1800]",
    )
    serve.add_argument(
        "--ascend-runtime",
        "-useAscendDocker",
        **bool_flag(None),
        help="answer with ASCEND_VISIBLE_DEVICES for the Ascend container runtime "
        "(default: env ASCEND_DOCKER_RUNTIME == True, as Huawei's plugin decides)",
    )
    serve.add_argument(
        "--volcano-type",
        "-volcanoType",
        **bool_flag(False),
        help="give containers the scheduler's chips from pod annotations (needs --kube)",
    )
    serve.add_argument(
        "--kube",
        choices=["off", *MODES],
        default="off",
        help="off: no Kubernetes API, the kubelet's device IDs are the chips; in-cluster: the "
        "pod's service account; kubeconfig: the file given with --kubeconfig; auto: "
        "--kubeconfig, $KUBECONFIG, ~/.kube/config, else in-cluster (as kubectl)",
    )
    serve.add_argument("--kubeconfig", type=Path, help="kubeconfig file for --kube kubeconfig")
    serve.add_argument(
        "--deviceinfo-heartbeat",
        type=_heartbeat,
        default=60.0,
        help="seconds: DeviceInfo is written on every change and at least this often "
        "(below the 300 s after which schedulers ignore it)",
    )
    serve.add_argument(
        "--sub-health-codes",
        type=fault_codes,
        default=frozenset(),
        help="comma list of hex fault codes that make a healthy chip sub-healthy "
        "(published with level SubHealthFault: schedulers use the node last)",
    )
    serve.add_argument(
        "--preset-virtual-device",
        "-presetVirtualDevice",
        **bool_flag(True),
        help="true: serve pre-created vNPUs as their own resources (huawei.com/Ascend310P-2c); "
        "false: dynamic vNPU on 310P, served as huawei.com/npu-core (needs -volcanoType)",
    )
    serve.add_argument(
        "--hot-reset",
        "-hotReset",
        type=hot_reset_mode,
        default=-1,
        help="-1: never reset a chip; 0 (inference) or 2 (training, offline): reset faulty "
        "chips by reset group once no pod and no process is on the group for 60 s",
    )
    serve.add_argument(
        "--third-party-scan-delay",
        "-thirdPartyScanDelay",
        type=int_at_least(0),
        default=300,
        help="seconds after a failed hot reset before chips another party reset are scanned",
    )
    serve.add_argument(
        "--device-reset-timeout",
        "-deviceResetTimeout",
        type=int_between(10, 600),
        default=600,
        help="seconds to wait at start for the driver to report every chip it counts "
        "[10, 600]; then the chips there are are served",
    )
    serve.add_argument(
        "--enable-healthz",
        **bool_flag(False),
        help="serve GET / and /healthz on --healthz-address (Huawei's liveness probe)",
    )
    serve.add_argument(
        "--healthz-address",
        type=int_between(1025, 65535),
        default=11251,
        metavar="PORT",
        help="port of the healthz server, on every address of the node [1025, 65535]",
    )
    serve.add_argument(
        "--tls-cert-file", type=Path, help="healthz over HTTPS: certificate (with the key)"
    )
    serve.add_argument(
        "--tls-private-key-file", type=Path, help="healthz over HTTPS: private key (with the cert)"
    )
    serve.add_argument(
        "--pod-resources-socket",
        type=unix_socket_path,
        default=POD_RESOURCES_SOCKET,
        help="the kubelet's PodResources socket (repairs missing chip records)",
    )
    serve.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default: env NODE_NAME, from the downward API)",
    )
    policies.add_flag(serve, required_by_default=False)
    add_log_options(serve, huawei_spellings=True)
    for long, huawei, kind, default, _ in NO_EFFECT:
        # Go's flag package takes a bool flag bare (-autoStowing), as bool_flag does.
        takes = (
            bool_flag(bool(default)) if kind is flag_bool else {"type": kind, "default": default}
        )
        serve.add_argument(long, huawei, **takes, help=argparse.SUPPRESS)
    serve.add_argument(
        "--metrics-listen",
        type=listen_address_or_off,
        default="",
        metavar="HOST:PORT",
        help="HOST:PORT for /metrics, /healthz and /readyz (off when empty)",
    )
    serve.add_argument(
        "--npu-exporter-series",
        **bool_flag(False),
        help="also serve Huawei npu-exporter's series that npu-smi gives (npu_chip_info_*, "
        "container_npu_*) on /metrics",
    )
    serve.add_argument(
        "--reset-dir",
        type=folder_or_off,
        default=RESET_DIR,
        metavar="DIR",
        help="host folder of the jobs' reset-config-<job> ConfigMaps as files "
        "(DIR/<namespace>.reset-config-<job>/reset.json; empty: off; needs --kube)",
    )
    serve.add_argument(
        "--datatrace-dir",
        type=folder_or_off,
        default=DATATRACE_DIR,
        metavar="DIR",
        help="host folder of the jobs' data-trace-<job> ConfigMaps as files (empty: off)",
    )
    devices = parser.add_command("devices", help="print the chips the driver discovers, as JSON")
    driver_flags(devices)
    status = parser.add_command("status", help="show this node's chips as a ring diagram")
    driver_flags(status)
    status.add_argument(
        "--kube",
        choices=["off", *MODES],
        default="off",
        help="with the API: also show which pod holds which chip",
    )
    status.add_argument("--kubeconfig", type=Path, help="kubeconfig file (--kube)")
    status.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="output format"
    )
    status.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", "this-node"),
        help="this node's name, whose pods are shown (default: env NODE_NAME)",
    )
    info = parser.add_command(
        "deviceinfo", help="print the DeviceInfo ConfigMap this node publishes"
    )
    driver_flags(info)
    info.add_argument("--node", required=True, help="the node name (NODE_NAME in the DaemonSet)")
    info.add_argument(
        "--update-time", type=int_at_least(0), help="UpdateTime, Unix seconds (default: now)"
    )
    return parser


def _read_chips(args: argparse.Namespace) -> NodeChips | None:
    """The driver's chips, or None after printing why they cannot be read."""
    try:
        return make_driver(args).read()
    except DriverError as failed:
        print(f"error: {failed}", file=sys.stderr)
        return None


def _devices(args: argparse.Namespace) -> int:
    node = _read_chips(args)
    if node is None:
        return EXIT_BAD_INPUT
    chips = [
        {
            "id": c.id,
            "logic_id": c.logic_id,
            "name": node.device_id(c),
            "health": c.health,
            "model": c.model,
        }
        for c in node.chips
    ]
    print(json.dumps(chips))
    return 0


def _own_pod() -> tuple[str, str] | None:
    """The agent's pod from the downward API (the chart sets POD_NAMESPACE and POD_NAME)."""
    namespace, name = os.environ.get("POD_NAMESPACE", ""), os.environ.get("POD_NAME", "")
    return (namespace, name) if namespace and name else None


def _deviceinfo(args: argparse.Namespace) -> int:
    node = _read_chips(args)
    if node is None:
        return EXIT_BAD_INPUT
    update_time = int(time.time()) if args.update_time is None else args.update_time
    print(json.dumps(configmap(args.node, device_info(node, (), update_time)), indent=2))
    return 0


def _status(args: argparse.Namespace) -> int:
    node = _read_chips(args)
    if node is None:
        return EXIT_BAD_INPUT
    holders: dict[int, str] = {}
    if args.kube != "off":
        try:
            gateway = _gateway(kubeconfig_for(args.kube, args.kubeconfig))
            pods, _ = list_all(gateway, Selection("Pod", fields=f"spec.nodeName={args.node_name}"))
        except (KubeError, ValueError) as failed:
            print(f"error: {failed}", file=sys.stderr)
            return EXIT_BAD_INPUT
        holders = holders_by_node(map(pod_view, pods)).get(args.node_name, {})
    unhealthy = {c.id for c in node.chips if not c.healthy}
    free = {c.id for c in node.chips} - unhealthy - set(holders)
    if args.output == "json":
        print(
            json.dumps(
                {
                    "node": args.node_name,
                    "product": node.product,
                    "free": sorted(free),
                    "unhealthy": sorted(unhealthy),
                    "holders": {str(c): pod for c, pod in sorted(holders.items())},
                }
            )
        )
        return 0
    if node.product is None:
        print(
            f"{args.node_name}: {node.resource} chips {sorted(c.id for c in node.chips)}, "
            f"unhealthy {sorted(unhealthy)} (no ring topology known; --product names it)"
        )
        return 0
    from chip_topology.diagram import LEGEND, node_lines  # noqa: PLC0415 (only this command draws)

    print(f"{args.node_name} ({LEGEND}):")
    print("\n".join(node_lines(args.node_name, node.product, free, unhealthy, holders)))
    return 0


def _gateway(kubeconfig: Path | None) -> KubeGateway:
    """The official client, imported only when the API is used: it is a third of the
    agent's memory, and ``--kube off`` needs none of it."""
    from infra.kube.client import KubernetesGateway  # noqa: PLC0415

    return KubernetesGateway.from_environment(kubeconfig)


def _serve(args: argparse.Namespace) -> int:
    try:
        configure_logs(args.log_level, args.log_format == "json", args.log_file, args.log_backups)
    except OSError as failed:
        print(f"error: --log-file {args.log_file}: {failed.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for long, huawei, _, default, why in NO_EFFECT:
        value = getattr(args, long.removeprefix("--").replace("-", "_"))
        if value != default:
            log.warning("%s=%s accepted, has no effect here: %s", huawei, value, why)
    try:
        with exit_on_bind_error({"--healthz-address": ("", args.healthz_address)}):
            healthz = _healthz(args)
        config = _agent_config(args)
        # Huawei's DaemonSets cannot ask for our policies: the agent starts without them,
        # loudly, unless told --require-admission-policies (as our manifests tell it).
        require = policies.required(args, by_default=False)
        gateway = (
            None if config.kube is None else _gateway(kubeconfig_for(args.kube, args.kubeconfig))
        )
    except (KubeError, ValueError) as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    gone: list[str] = []
    if gateway is not None:
        gone, refusal = policies.check(gateway, policies.AGENT_POLICIES, not require)
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            return EXIT_BAD_INPUT
    stop = stop_on_signals()
    try:
        driver = make_driver(args, args.period)
        wait_for_every_chip(driver, args.device_reset_timeout, stop)
        with exit_on_bind_error({"--metrics-listen": config.metrics_listen}):
            agent = start_node_agent(config, driver, gateway)
    except DriverError as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if gateway is None or config.kube is None:
        policies.report(agent.metrics.registry, "ascend_agent", gone)
    else:
        watch = policies.PolicyWatch(
            gateway, policies.AGENT_POLICIES, gone, args.policies_recheck_period
        )
        watch.report(agent.metrics.registry, "ascend_agent")
        if gone:
            _warn_on_node(gateway, config.kube.node_name, gone)
        watch.start(stop)
    settle()
    log.info(
        "serving %s from %s (ascend runtime: %s, kube: %s)",
        args.plugin_dir,
        args.driver,
        config.ascend_runtime,
        args.kube,
    )
    wait_until(stop)
    agent.stop()
    if healthz is not None:
        healthz.stop()
    return 0


def _warn_on_node(gateway: KubeGateway, node: str, gone: Sequence[str]) -> None:
    """One Warning Event on this agent's Node, at start: which policies are missing and
    what each guards (``kubectl describe node`` shows it; the gauge and the chart's alert
    AscendNpuAdmissionPoliciesMissing follow them after)."""
    EventRecorder(gateway, COMPONENT, node).warn(
        ObjectRef("Node", "", node),
        POLICIES_MISSING,
        policies.summary(policies.AGENT_POLICIES, gone),
    )


def _healthz(args: argparse.Namespace) -> HttpServer | None:
    """The healthz server of ``--enable-healthz``, started first as upstream's (so the
    liveness probe answers while chips are waited for); ValueError names a bad flag. As
    Ascend/mind-cluster component/ascend-common/common-utils/healthz/healthz.go: the port on
    every address, HTTPS when both TLS files are given, both or neither."""
    if not args.enable_healthz:
        return None
    cert, key = args.tls_cert_file, args.tls_private_key_file
    if (cert is None) != (key is None):
        raise ValueError(
            "--tls-cert-file and --tls-private-key-file must be both set or both empty"
        )
    # Imported only for an agent that serves healthz (see _gateway on memory).
    from infra.http import healthz_server, tls_context  # noqa: PLC0415

    tls = None
    if cert is not None and key is not None:
        try:
            tls = tls_context(cert, key, None)
        except OSError as failed:  # ssl.SSLError among them
            raise ValueError(
                f"--tls-cert-file {cert}, --tls-private-key-file {key}: {failed}"
            ) from None
    server = healthz_server(tls)
    url = server.start("", args.healthz_address)
    log.info("healthz server started on %s", url)
    return server


def wait_for_every_chip(driver: NpuDriver, timeout: float, stop: threading.Event) -> None:
    """Wait up to ``timeout`` seconds (-deviceResetTimeout) for the driver to report every
    chip it counts, reading again every second; then go on with the chips there are, naming
    the missing ones. A driver that reports none at all fails at once (DriverError), as
    upstream's does when DCMI does not start (Ascend/mind-cluster
    component/ascend-common/devmanager/devmanager.go WaitDeviceOnline)."""
    deadline = time.monotonic() + timeout
    missing = driver.read().missing
    if missing:
        log.info("waiting up to %.0f s for chips %s to be reported", timeout, _ids(missing))
    while missing:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or stop.wait(min(WAIT_STEP, remaining)):
            break
        missing = driver.read().missing
    if missing:
        log.warning(
            "chips %s not reported after %.0f s (-deviceResetTimeout): serving the others",
            _ids(missing),
            timeout,
        )


def _ids(chips: Sequence[int]) -> str:
    return ", ".join(map(str, chips))


def _agent_config(args: argparse.Namespace) -> AgentConfig:
    """The typed configuration of ``serve``; ValueError names a contradiction."""
    kube = None
    if args.kube == "off":
        if args.volcano_type:
            raise ValueError("-volcanoType needs the Kubernetes API, and --kube is off")
    else:
        if not args.node_name:
            raise ValueError("--kube needs this node's name: set NODE_NAME or --node-name")
        kube = KubeSettings(
            args.node_name,
            args.volcano_type,
            args.pod_resources_socket,
            heartbeat=args.deviceinfo_heartbeat,
            sub_health_codes=args.sub_health_codes,
            pod=_own_pod(),
        )
    _check_paths(args)
    ascend_runtime = (
        args.ascend_runtime
        if args.ascend_runtime is not None
        else os.environ.get("ASCEND_DOCKER_RUNTIME") == "True"
    )
    if not args.preset_virtual_device and not args.volcano_type:
        raise ValueError("presetVirtualDevice is false, volcanoType should be true")
    return AgentConfig(
        args.plugin_dir,
        ascend_runtime,
        float(args.period),
        kube,
        args.metrics_listen,
        preset_virtual=args.preset_virtual_device,
        hot_reset=hot_reset.enabled(args.hot_reset),
        third_party_scan_delay=float(args.third_party_scan_delay),
        reset_mirrors=() if kube is None else mirrors(args.reset_dir, args.datatrace_dir),
        npu_exporter_series=args.npu_exporter_series,
    )


def _check_paths(args: argparse.Namespace) -> None:
    """What the file system already says about the socket paths (ValueError names the flag):
    a plugin directory that is a file, or one the agent may not write its sockets in; a
    PodResources path that is not a socket (a missing one is waited for: the kubelet makes it)."""
    plugin_dir: Path = args.plugin_dir
    if plugin_dir.exists() and not plugin_dir.is_dir():
        raise ValueError(f"--plugin-dir {plugin_dir}: not a directory")
    if plugin_dir.is_dir() and not os.access(plugin_dir, os.W_OK | os.X_OK):
        raise ValueError(f"--plugin-dir {plugin_dir}: not writable, the sockets cannot be made")
    socket: Path = args.pod_resources_socket
    if args.kube != "off" and socket.exists() and not socket.is_socket():
        raise ValueError(f"--pod-resources-socket {socket}: not a socket")


def fault_codes(text: str) -> frozenset[str]:
    """A comma list of hex fault codes (``80E01801,80C98008``), upper-cased."""
    codes = frozenset(c.strip().upper() for c in text.split(",") if c.strip())
    bad = sorted(c for c in codes if not (c.isascii() and len(c) <= 16 and _is_hex(c)))
    if bad:
        raise argparse.ArgumentTypeError(f"{bad[0]!r} is not a hex fault code like 80E01801")
    return codes


def folder_or_off(text: str) -> Path | None:
    """An absolute folder, or None for an empty value (off)."""
    if not text:
        return None
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"expected an absolute path or empty, got {text!r}")
    return Path(text)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789ABCDEF" for c in text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] not in (*COMMANDS, "-h", "--help", "--version", "-version"):
        arguments.insert(0, "serve")
    if arguments[0] == "serve":
        serve = parser.commands["serve"]
        options = {o for action in serve._actions for o in action.option_strings}
        try:
            arguments = [
                "serve",
                *config.arguments(serve, go_spellings(arguments[1:], options), "ASCEND_AGENT_"),
            ]
        except config.ConfigError as bad:
            print(f"error: {bad}", file=sys.stderr)
            return EXIT_BAD_INPUT
    args = parser.parse_args(arguments)
    if args.command == "devices":
        return _devices(args)
    if args.command == "deviceinfo":
        return _deviceinfo(args)
    if args.command == "status":
        return _status(args)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
