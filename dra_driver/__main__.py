"""``python -m dra_driver serve``: the DRA driver of this node (``NODE_NAME``).

The chips come from the agent's drivers (``--driver npu-smi``, or ``fake`` with a state
file); the kubelet's paths default to where a kubelet keeps them. A bad flag value is
refused in one line naming the flag, with exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from chip_drivers.chips import DriverError
from chip_drivers.choice import driver_flags, make_driver
from contract.dra import DEFAULT_DRIVER
from dra_driver.cdi import HostPaths
from dra_driver.driver import (
    CDI_ROOT,
    PLUGINS_DIR,
    REGISTRY_DIR,
    DraConfig,
    ServedTwice,
    start_dra_driver,
)
from dra_driver.metrics import PREFIX
from infra.cli import (
    add_version,
    bool_flag,
    exit_on_bind_error,
    listen_address_or_off,
    settle,
    stop_on_signals,
    unix_socket_path,
    wait_until,
)
from infra.config import CommandParser
from infra.kube import policies
from infra.kube.location import MODES, kubeconfig_for
from infra.kube.port import KubeError
from infra.logs import add_log_options
from infra.logs import configure as configure_logs

log = logging.getLogger("dra_driver")
EXIT_BAD_INPUT = 2
# A DRA driver's name, as the API server validates a ResourceSlice's spec.driver
# (k8s.io/api resource/v1 DriverNameMaxLength, "the same as for CSI driver names", and
# pkg/apis/resource/validation: a DNS subdomain once lower-cased).
DRIVER_NAME_MAX = 63
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def driver_name(text: str) -> str:
    """An argparse ``type=``: a DNS subdomain of at most 63 characters (npu.example.com)."""
    if len(text) > DRIVER_NAME_MAX or not _DNS_SUBDOMAIN.fullmatch(text.lower()):
        raise argparse.ArgumentTypeError(
            f"expected a DNS subdomain of at most {DRIVER_NAME_MAX} characters "
            f"(npu.example.com), got {text!r}"
        )
    return text


def build_parser() -> CommandParser:
    parser = CommandParser(prog="python -m dra_driver", description=__doc__)
    add_version(parser)
    serve = parser.add_command(
        "serve", required=True, help="publish the chips and serve the kubelet"
    )
    serve.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default: env NODE_NAME, from the downward API)",
    )
    serve.add_argument(
        "--driver-name", type=driver_name, default=DEFAULT_DRIVER, help="the DRA driver's name"
    )
    driver_flags(serve)
    serve.add_argument(
        "--plugins-dir",
        type=Path,
        default=PLUGINS_DIR,
        help="the kubelet's plugins directory (DRIVER/dra.sock is served there)",
    )
    serve.add_argument(
        "--registry-dir",
        type=Path,
        default=REGISTRY_DIR,
        help="the kubelet's plugin registration directory (DRIVER-reg.sock)",
    )
    serve.add_argument(
        "--cdi-root", type=Path, default=CDI_ROOT, help="where the CDI specs are written"
    )
    serve.add_argument(
        "--ascend-runtime",
        **bool_flag(False),
        help="CDI specs set ASCEND_VISIBLE_DEVICES for the Ascend runtime (else device nodes)",
    )
    # What of the paths the CDI specs may name the host has, read once at start: the set the
    # init step wrote (the chart), or checked here under a host root (default /, on the host).
    serve.add_argument(
        "--host-paths",
        type=Path,
        help="the file python -m dra_driver.host_paths wrote: the host paths the CDI specs "
        "may name that the host has (this process then reads none of the host's files)",
    )
    serve.add_argument(
        "--host-root",
        type=Path,
        help="where the host's / is seen: its paths (and HOST_ROOT/dev) are checked here once "
        "at start (default /, without --host-paths)",
    )
    serve.add_argument(
        "--no-ring-free", action="store_true", help="do not publish the ringFree attribute"
    )
    serve.add_argument(
        "--kube",
        choices=MODES,
        default="in-cluster",
        help="in-cluster: the pod's service account; kubeconfig: --kubeconfig's file; auto: "
        "as kubectl finds one",
    )
    serve.add_argument("--kubeconfig", type=Path, help="kubeconfig file (--kube kubeconfig)")
    serve.add_argument(
        "--metrics-listen",
        type=listen_address_or_off,
        default="",
        metavar="HOST:PORT",
        help="HOST:PORT for /metrics, /healthz and /readyz (off when empty)",
    )
    policies.add_flag(serve, required_by_default=True)
    add_log_options(serve)
    return parser


def host_paths_of(args: argparse.Namespace) -> HostPaths:
    """The host paths the CDI specs may name that the host has; ValueError names the flag."""
    if args.host_paths is not None and args.host_root is not None:
        raise ValueError("--host-paths and --host-root: give one (the set, or where to check)")
    if args.host_paths is not None:
        try:
            return HostPaths.load(args.host_paths)
        except ValueError as bad:
            raise ValueError(f"--host-paths: {bad}") from None
    root: Path = args.host_root or Path("/")
    try:
        return HostPaths.scan(root)
    except OSError as failed:
        raise ValueError(f"--host-root: {failed.filename}: {failed.strerror}") from None


def _config(args: argparse.Namespace) -> DraConfig:
    """The typed configuration of ``serve``; ValueError names the flag that is wrong."""
    if not args.node_name:
        raise ValueError("--node-name (or NODE_NAME) is required")
    config = DraConfig(
        args.node_name,
        driver=args.driver_name,
        plugins_dir=args.plugins_dir,
        registry_dir=args.registry_dir,
        cdi_root=args.cdi_root,
        ascend_runtime=args.ascend_runtime,
        host=host_paths_of(args),
        ring_free_hint=not args.no_ring_free,
        metrics_listen=args.metrics_listen,
    )
    # The sockets' paths depend on the driver's name: checked once both are known.
    for flag, socket in (
        ("--plugins-dir", config.plugins_dir / config.driver / "dra.sock"),
        ("--registry-dir", config.registry_dir / f"{config.driver}-reg.sock"),
    ):
        try:
            unix_socket_path(str(socket))
        except argparse.ArgumentTypeError as bad:
            raise ValueError(f"{flag}: {bad}") from None
    return config


def _serve(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
        # Not a drop-in for a binary of Huawei's: refuses without its policies unless told.
        require = policies.required(args, by_default=True)
        kubeconfig = kubeconfig_for(args.kube, args.kubeconfig)
    except ValueError as bad:
        print(f"error: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        configure_logs(args.log_level, args.log_format == "json", args.log_file, args.log_backups)
    except OSError as failed:
        print(f"error: --log-file {args.log_file}: {failed.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from infra.kube.client import KubernetesGateway  # noqa: PLC0415

    stop = stop_on_signals()
    try:
        gateway = KubernetesGateway.from_environment(kubeconfig)
        gone, refusal = policies.check(gateway, policies.DRA_DRIVER_POLICIES, not require)
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            return EXIT_BAD_INPUT
        with exit_on_bind_error({"--metrics-listen": config.metrics_listen}):
            driver = start_dra_driver(config, make_driver(args), gateway)
    except (DriverError, ServedTwice, KubeError) as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    watch = policies.PolicyWatch(
        gateway, policies.DRA_DRIVER_POLICIES, gone, args.policies_recheck_period
    )
    watch.report(driver.metrics.registry, PREFIX)
    watch.start(stop)
    settle()
    wait_until(stop)
    driver.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
