"""``python -m scheduler_core.volcano_config merge|remove``: our extender in the user's Volcano.

Volcano reads one scheduler configuration, the ``volcano-scheduler.conf`` key of
``volcano-system/volcano-scheduler-configmap``, and a configuration given replaces its
defaults whole. So installing the extender must not ship that ConfigMap (applying it would drop
every tier and plugin the user has): this command adds one plugin entry, Volcano's ``extender``
plugin with our verbs, to the first tier of the configuration already there, and ``remove``
takes out exactly that entry again. Volcano's scheduler re-reads the file when the ConfigMap's
mount changes (volcano-sh/volcano ``pkg/scheduler/scheduler.go``, ``watchSchedulerConf``), so
neither needs a restart.

Our entry is the ``extender`` plugin whose ``extender.urlPrefix`` is the one in the plugin file;
an ``extender`` entry with another URL is someone else's and is never touched: ``merge``
refuses (Volcano builds one extender plugin per name). The update carries the resourceVersion
it read, so a concurrent edit is retried on, never overwritten. Comments in the user's
configuration are not kept (YAML has no round trip for them here); the keys and their order are.
Exit codes: 0 done (or nothing to do), 2 bad input (named), 1 the API server failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.kube.client import KubernetesGateway
from infra.kube.port import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

PLUGIN = "extender"
URL = "extender.urlPrefix"
ATTEMPTS = 5


class BadConfiguration(ValueError):
    """The configuration or the plugin entry cannot be merged; the message names why."""


@dataclass(frozen=True, slots=True)
class Entry:
    """Our plugin entry, as it stands in a tier: ``{name: extender, arguments: {...}}``."""

    arguments: dict[str, Any]

    @property
    def url(self) -> str:
        return str(self.arguments[URL])

    @staticmethod
    def parse(text: str) -> Entry:
        try:
            entry = yaml.safe_load(text)
        except yaml.YAMLError as bad:
            raise BadConfiguration(f"the plugin entry is not YAML: {_first_line(bad)}") from None
        if not isinstance(entry, dict) or entry.get("name") != PLUGIN:
            raise BadConfiguration(f"the plugin entry must be a mapping with name: {PLUGIN}")
        arguments = entry.get("arguments")
        if not isinstance(arguments, dict) or not isinstance(arguments.get(URL), str):
            raise BadConfiguration(f"the plugin entry needs arguments.{URL!r} (a URL)")
        return Entry(arguments)

    def as_plugin(self) -> dict[str, Any]:
        return {"name": PLUGIN, "arguments": self.arguments}


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _load(conf: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(conf) if conf.strip() else {}
    except yaml.YAMLError as bad:
        raise BadConfiguration(
            f"the Volcano configuration is not YAML: {_first_line(bad)}"
        ) from None
    if not isinstance(loaded, dict):
        raise BadConfiguration("the Volcano configuration is not a mapping")
    tiers = loaded.get("tiers", [])
    if not isinstance(tiers, list) or not all(
        isinstance(tier, dict) and isinstance(tier.get("plugins", []), list) for tier in tiers
    ):
        raise BadConfiguration(
            "the Volcano configuration's tiers must be a list of {plugins: [...]}"
        )
    return loaded


def _dump(conf: dict[str, Any]) -> str:
    return yaml.safe_dump(conf, sort_keys=False, default_flow_style=False)


def _extenders(conf: dict[str, Any]) -> list[tuple[list[Any], int, dict[str, Any]]]:
    """Every ``extender`` entry: (its tier's plugin list, its index, the entry)."""
    found = []
    for tier in conf.get("tiers", []):
        plugins = tier.get("plugins", [])
        for index, plugin in enumerate(plugins):
            if isinstance(plugin, dict) and plugin.get("name") == PLUGIN:
                found.append((plugins, index, plugin))
    return found


def _url_of(plugin: dict[str, Any]) -> object:
    arguments = plugin.get("arguments")
    return arguments.get(URL) if isinstance(arguments, dict) else None


def merged(conf: str, entry: Entry) -> str:
    """The configuration with our entry in it: replaced in place if there, else appended to the
    first tier (where Volcano's own samples put the extender, beside gang and priority)."""
    loaded = _load(conf)
    for plugins, index, plugin in _extenders(loaded):
        if _url_of(plugin) != entry.url:
            raise BadConfiguration(
                f"Volcano already has an extender plugin for {_url_of(plugin)!r}; "
                f"it takes one: remove that entry or point it at {entry.url!r}"
            )
        plugins[index] = entry.as_plugin()
        return _dump(loaded)
    tiers = loaded.setdefault("tiers", [])
    if not tiers:
        tiers.append({"plugins": []})
    tiers[0].setdefault("plugins", []).append(entry.as_plugin())
    return _dump(loaded)


def removed(conf: str, url: str) -> str:
    """The configuration without our entry (the same text when it holds none)."""
    loaded = _load(conf)
    ours = [
        (plugins, index) for plugins, index, plugin in _extenders(loaded) if _url_of(plugin) == url
    ]
    if not ours:
        return conf
    for plugins, index in reversed(ours):
        del plugins[index]
    return _dump(loaded)


def _update(gateway: KubernetesGateway, args: argparse.Namespace, entry: Entry) -> bool:
    """One read-change-write; False when another writer got in between (409)."""
    configmap = gateway.get_configmap(args.namespace, args.configmap)
    data = configmap.get("data") or {}
    conf = str(data.get(args.key, ""))
    changed = merged(conf, entry) if args.action == "merge" else removed(conf, entry.url)
    if changed == conf:
        log.info("%s/%s: nothing to %s", args.namespace, args.configmap, args.action)
        return True
    configmap["data"] = {**data, args.key: changed}
    try:
        gateway.update_configmap(configmap)  # carries the resourceVersion read above
    except Conflict:
        return False
    log.info("%s/%s: extender %s %sd", args.namespace, args.configmap, entry.url, args.action)
    return True


def run(args: argparse.Namespace) -> int:
    try:
        entry = Entry.parse(args.plugin_file.read_text(encoding="utf-8"))
    except OSError as failed:
        print(f"error: --plugin-file {args.plugin_file}: {failed.strerror}", file=sys.stderr)
        return 2
    except BadConfiguration as bad:
        print(f"error: --plugin-file {args.plugin_file}: {bad}", file=sys.stderr)
        return 2
    gateway = KubernetesGateway.from_environment(args.kubeconfig)
    try:
        for _ in range(ATTEMPTS):
            if _update(gateway, args, entry):
                return 0
        print(f"error: {args.configmap} kept changing under {ATTEMPTS} updates", file=sys.stderr)
        return 1
    except BadConfiguration as bad:
        print(f"error: {args.namespace}/{args.configmap} {args.key}: {bad}", file=sys.stderr)
        return 2
    except NotFound:
        if args.action == "remove":  # Volcano gone first: nothing of ours is left anywhere
            return 0
        print(
            f"error: {args.namespace}/{args.configmap} not found: is Volcano installed?",
            file=sys.stderr,
        )
        return 2
    except KubeError as failed:
        print(f"error: {failed}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_core.volcano_config",
        description="Add our extender plugin to Volcano's scheduler configuration, or remove it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("action", choices=["merge", "remove"])
    parser.add_argument(
        "--plugin-file",
        type=Path,
        required=True,
        help="YAML of the plugin entry: {name: extender, arguments: {extender.urlPrefix: ...}}",
    )
    parser.add_argument("--namespace", default="volcano-system")
    parser.add_argument("--configmap", default="volcano-scheduler-configmap")
    parser.add_argument("--key", default="volcano-scheduler.conf")
    parser.add_argument("--kubeconfig", type=Path, help="in-cluster when not given")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
