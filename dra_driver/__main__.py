"""``python -m dra_driver serve``: the DRA driver of this node (``NODE_NAME``).

The chips come from the agent's drivers (``--driver npu-smi``, or ``fake`` with a state
file); the kubelet's paths default to where a kubelet keeps them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from agent.__main__ import driver_flags, make_driver
from agent.chips import DriverError
from contract.dra import DEFAULT_DRIVER
from dra_driver.driver import (
    CDI_ROOT,
    PLUGINS_DIR,
    REGISTRY_DIR,
    DraConfig,
    ServedTwice,
    start_dra_driver,
)
from infra.cli import add_version, settle, stop_on_signals, wait_until
from infra.kube.location import MODES, kubeconfig_for
from infra.kube.port import KubeError
from infra.logs import configure as configure_logs
from infra.logs import log_level

log = logging.getLogger("dra_driver")
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dra_driver", description=__doc__)
    add_version(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="publish the chips and serve the kubelet")
    serve.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""))
    serve.add_argument("--driver-name", default=DEFAULT_DRIVER, help="the DRA driver's name")
    driver_flags(serve)
    serve.add_argument("--plugins-dir", type=Path, default=PLUGINS_DIR)
    serve.add_argument("--registry-dir", type=Path, default=REGISTRY_DIR)
    serve.add_argument("--cdi-root", type=Path, default=CDI_ROOT)
    serve.add_argument(
        "--ascend-runtime",
        action="store_true",
        help="CDI specs set ASCEND_VISIBLE_DEVICES for the Ascend runtime (else device nodes)",
    )
    serve.add_argument(
        "--no-ring-free", action="store_true", help="do not publish the ringFree attribute"
    )
    serve.add_argument("--kube", choices=MODES, default="in-cluster")
    serve.add_argument("--kubeconfig", type=Path)
    serve.add_argument("--log-level", type=log_level, default="info")
    return parser


def _serve(args: argparse.Namespace) -> int:
    configure_logs(args.log_level, False)
    if not args.node_name:
        print("error: --node-name (or NODE_NAME) is required", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = DraConfig(
        args.node_name,
        driver=args.driver_name,
        plugins_dir=args.plugins_dir,
        registry_dir=args.registry_dir,
        cdi_root=args.cdi_root,
        ascend_runtime=args.ascend_runtime,
        ring_free_hint=not args.no_ring_free,
    )
    from infra.kube.client import KubernetesGateway  # noqa: PLC0415

    try:
        gateway = KubernetesGateway.from_environment(kubeconfig_for(args.kube, args.kubeconfig))
        driver = start_dra_driver(config, make_driver(args), gateway)
    except (DriverError, ServedTwice, KubeError) as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    settle()
    stop = stop_on_signals()
    wait_until(stop)
    driver.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
