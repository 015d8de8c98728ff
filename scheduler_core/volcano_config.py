"""``python -m scheduler_core.volcano_config merge|remove``: our extender in the user's Volcano.

Volcano reads one scheduler configuration, the ``volcano-scheduler.conf`` key of
``volcano-system/volcano-scheduler-configmap``, and a configuration given replaces its
defaults whole. So installing the extender must not ship that ConfigMap (applying it would drop
every tier and plugin the user has): this command adds one plugin entry, Volcano's ``extender``
plugin with our verbs, to the first tier of the configuration already there, and ``remove``
takes out exactly that entry again. Volcano's scheduler re-reads the file when the ConfigMap's
mount changes (volcano-sh/volcano ``pkg/scheduler/scheduler.go``, ``watchSchedulerConf``), so
neither needs a restart.

Our entry is the ``extender`` plugin whose ``extender.urlPrefix`` is the one in the plugin file
(credentials aside); an ``extender`` entry with another URL is someone else's and is never
touched: ``merge`` refuses (Volcano builds one extender plugin per name).

The service's verbs need credentials, and Volcano's extender plugin has no TLS or header
settings (volcano-sh/volcano pkg/scheduler/plugins/extender/extender.go: a plain
``http.Client{Timeout}``). So with ``--token-file`` merge writes the token into the
urlPrefix's userinfo (``https://volcano:<token>@host/...``: Go's client sends it as HTTP Basic,
src/net/http/client.go ``send``), and with ``--ca-file`` makes the service's CA trusted by
Volcano's scheduler: a ConfigMap of it in Volcano's namespace, mounted into the
volcano-scheduler Deployment at ``/etc/ascend-npu-ca``, whose directory ``SSL_CERT_DIR`` adds
to Go's roots (src/crypto/x509/root_unix.go). ``remove`` takes the mount, the variable and the
ConfigMap out again. Changing the Deployment restarts Volcano's scheduler once; an upgrade of
Volcano that rewrites its Deployment drops them (run merge again). The token is as secret as
Volcano's ConfigMap: whoever may read that ConfigMap may call the verbs.

With the adapter's entry, ``--scheduler-image`` sets the vc-scheduler image that carries its
``.so`` (``python -m image.vc_scheduler``: a Go plugin loads only into the binary it was built
beside) on the Deployment's scheduler container and on every container of the same image (Huawei's
init container), noting the image it replaced in an annotation of the Deployment; ``remove``
puts that image back where ours still runs.

``merge`` first checks which Volcano runs (the scheduler container's image tag, or
``--volcano-version``): before v1.13.0 Volcano's extender plugin has no ``allocateFuncVerb``,
``deallocateFuncVerb`` or ``managedResources`` (volcano-sh/volcano v1.12.0
``pkg/scheduler/plugins/extender/extender.go`` reads none of them and ignores unknown keys), so
every NPU pod would be bound without its chips. Measured on the real Volcano v1.12.0: 300 of 300
pods bound, none with chips. merge then refuses, naming the version, and changes nothing.

Each update carries the resourceVersion it read, so a concurrent edit is retried on, never
overwritten. Comments in the user's
configuration are not kept (YAML has no round trip for them here); the keys and their order are.
Exit codes: 0 done (or nothing to do), 2 bad input (named), 1 the API server failed.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import re
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from contract.annotations import SCHEDULER_IMAGE_ANNOTATION
from contract.objects import Obj
from infra.kube.client import KubernetesGateway, api_client
from infra.kube.port import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

PLUGIN = "extender"
ADAPTER = "ascend-npu-adapter"  # volcano_adapter/: in-process, the chips on Volcano's Binding
# Where each plugin we merge keeps the service's URL.
URL_KEYS = {PLUGIN: "extender.urlPrefix", ADAPTER: "urlPrefix"}
URL = URL_KEYS[PLUGIN]
ATTEMPTS = 5


USER = "volcano"  # the userinfo's user name (the service reads only the password)
CA_DIRECTORY = "/etc/ascend-npu-ca"
CA_VOLUME = "ascend-npu-scheduler-ca"
CERT_DIR = "SSL_CERT_DIR"
GO_CERT_DIR = "/etc/ssl/certs"  # kept first: Go reads SSL_CERT_DIR instead of its defaults
FROM_TO = ("from", "to")  # SCHEDULER_IMAGE_ANNOTATION's keys


class BadConfiguration(ValueError):
    """The configuration or the plugin entry cannot be merged; the message names why."""


class NotTrusted(ValueError):
    """Volcano's scheduler Deployment cannot be made to trust the CA; the message names why."""


# The first Volcano whose extender plugin gives a pod its chips before binding it
# (allocateFuncVerb/deallocateFuncVerb, managedResources: volcano-sh/volcano v1.13.0
# pkg/scheduler/plugins/extender/extender.go).
MINIMUM_VOLCANO = (1, 13, 0)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def volcano_version(text: str) -> tuple[int, int, int] | None:
    """The version an image reference's tag (or a version given) names, None when it names
    none (no tag, ``latest``, a digest alone)."""
    reference = text.split("@", 1)[0]
    tag = reference.rpartition(":")[2] if ":" in reference.rpartition("/")[2] else reference
    found = _VERSION.match(tag)
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def check_volcano(deployment: Obj, container: str, declared: str | None) -> None:
    """NotTrusted naming the version when Volcano's extender plugin cannot give pods their
    chips (or when neither its image nor ``--volcano-version`` says which Volcano it is).
    Not asked for the adapter's entry: the adapter posts the allocations itself and is built
    into the user's own vc-scheduler (Volcano v1.12.0 in the tests)."""
    where = f"{deployment['metadata'].get('namespace')}/{deployment['metadata'].get('name')}"
    image = str(_container(deployment["spec"]["template"]["spec"], container).get("image", ""))
    version = volcano_version(declared) if declared else volcano_version(image)
    if version is None:
        named = f"--volcano-version {declared!r}" if declared else f"its image {image!r}"
        raise NotTrusted(
            f"{where}: {named} does not say which Volcano runs; set --volcano-version "
            "(chart value volcano.version) to its version, e.g. v1.13.0"
        )
    if version < MINIMUM_VOLCANO:
        shown = "v" + ".".join(map(str, version))
        raise NotTrusted(
            f"{where} runs Volcano {shown} ({declared or image}): its extender plugin has no "
            "allocateFuncVerb, deallocateFuncVerb or managedResources (Volcano >= v1.13.0), so "
            "it would bind NPU pods without their chips. Nothing was changed: upgrade Volcano "
            "to v1.13.0 or later (docs/compatibility.md)"
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """Our plugin entry, as it stands in a tier: ``{name: extender, arguments: {...}}``, or
    the in-process adapter's, ``{name: ascend-npu-adapter, arguments: {urlPrefix: ...}}``."""

    arguments: dict[str, Any]
    name: str = PLUGIN

    @property
    def url(self) -> str:
        return str(self.arguments[URL_KEYS[self.name]])

    @property
    def adapter(self) -> bool:
        return self.name == ADAPTER

    @staticmethod
    def parse(text: str) -> Entry:
        try:
            entry = yaml.safe_load(text)
        except yaml.YAMLError as bad:
            raise BadConfiguration(f"the plugin entry is not YAML: {_first_line(bad)}") from None
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or name not in URL_KEYS:
            raise BadConfiguration(
                f"the plugin entry must be a mapping with name: {PLUGIN} or {ADAPTER}"
            )
        key = URL_KEYS[str(name)]
        arguments = entry.get("arguments")
        if not isinstance(arguments, dict) or not isinstance(arguments.get(key), str):
            raise BadConfiguration(f"the plugin entry needs arguments.{key!r} (a URL)")
        return Entry(arguments, str(name))

    def as_plugin(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    def at(self, base: str) -> Entry:
        """The entry pointed at ``base`` (a scheme and host), its path kept: the service
        where it is reached from outside the cluster (the tests, the benchmarks)."""
        path = urllib.parse.urlsplit(self.url).path
        return Entry({**self.arguments, URL_KEYS[self.name]: base + path}, self.name)

    def with_token(self, token: str) -> Entry:
        """The entry whose urlPrefix carries ``token`` as its userinfo's password."""
        parts = urllib.parse.urlsplit(bare(self.url))
        secret = urllib.parse.quote(token, safe="")
        netloc = f"{USER}:{secret}@{parts.netloc}"
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        return Entry({**self.arguments, URL_KEYS[self.name]: url}, self.name)


def bare(url: object) -> str:
    """A URL without its userinfo (what names our entry, and what is logged)."""
    parts = urllib.parse.urlsplit(str(url))
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


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


def _entries(
    conf: dict[str, Any], names: tuple[str, ...] = tuple(URL_KEYS)
) -> list[tuple[list[Any], int, dict[str, Any]]]:
    """Every entry of a plugin ``names`` names: (its tier's plugin list, its index, the
    entry)."""
    found = []
    for tier in conf.get("tiers", []):
        plugins = tier.get("plugins", [])
        for index, plugin in enumerate(plugins):
            if isinstance(plugin, dict) and plugin.get("name") in names:
                found.append((plugins, index, plugin))
    return found


def _url_of(plugin: dict[str, Any]) -> object:
    arguments = plugin.get("arguments")
    key = URL_KEYS.get(str(plugin.get("name")), URL)
    return arguments.get(key) if isinstance(arguments, dict) else None


def merged(conf: str, entry: Entry) -> str:
    """The configuration with our entry in it: replaced in place if there, else appended to the
    first tier (where Volcano's own samples put the extender, beside gang and priority, and
    Huawei's configuration its plugin). Our entry of the other kind (the same service's URL)
    goes: the stock extender plugin and the adapter would both allocate each pod."""
    loaded = _load(conf)
    for _, _, plugin in _entries(loaded, (entry.name,)):
        if bare(_url_of(plugin)) != bare(entry.url):
            raise BadConfiguration(
                f"Volcano already has an {entry.name} plugin for {bare(_url_of(plugin))!r}; "
                f"it takes one: remove that entry or point it at {bare(entry.url)!r}"
            )
    other = tuple(n for n in URL_KEYS if n != entry.name)
    for plugins, index, plugin in reversed(_entries(loaded, other)):
        if bare(_url_of(plugin)) == bare(entry.url):
            del plugins[index]
    for plugins, index, _ in _entries(loaded, (entry.name,)):
        plugins[index] = entry.as_plugin()
        return _dump(loaded)
    tiers = loaded.setdefault("tiers", [])
    if not tiers:
        tiers.append({"plugins": []})
    tiers[0].setdefault("plugins", []).append(entry.as_plugin())
    return _dump(loaded)


def removed(conf: str, url: str) -> str:
    """The configuration without our entries, of either kind (the same text when it holds
    none)."""
    loaded = _load(conf)
    ours = [
        (plugins, index)
        for plugins, index, plugin in _entries(loaded)
        if bare(_url_of(plugin)) == bare(url)
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
    log.info("%s/%s: extender %s %sd", args.namespace, args.configmap, bare(entry.url), args.action)
    return True


def trusting(deployment: Obj, container: str, configmap: str) -> Obj:
    """The Deployment with the CA ConfigMap mounted into ``container`` and its directory in
    ``SSL_CERT_DIR`` (a copy; the same content when it is there already)."""
    changed = copy.deepcopy(deployment)
    spec = changed["spec"]["template"]["spec"]
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == CA_VOLUME for v in volumes):
        volumes.append({"name": CA_VOLUME, "configMap": {"name": configmap}})
    target = _container(spec, container)
    mounts = target.setdefault("volumeMounts", [])
    if not any(m.get("name") == CA_VOLUME for m in mounts):
        mounts.append({"name": CA_VOLUME, "mountPath": CA_DIRECTORY, "readOnly": True})
    env = target.setdefault("env", [])
    variable = next((e for e in env if e.get("name") == CERT_DIR), None)
    if variable is None:
        env.append({"name": CERT_DIR, "value": f"{GO_CERT_DIR}:{CA_DIRECTORY}"})
    elif CA_DIRECTORY not in str(variable.get("value", "")).split(":"):
        variable["value"] = f"{variable.get('value', '')}:{CA_DIRECTORY}".lstrip(":")
    return changed


def untrusting(deployment: Obj, container: str) -> Obj:
    """The Deployment without what ``trusting`` added (a copy)."""
    changed = copy.deepcopy(deployment)
    spec = changed["spec"]["template"]["spec"]
    spec["volumes"] = [v for v in spec.get("volumes", []) if v.get("name") != CA_VOLUME]
    if not spec["volumes"]:
        del spec["volumes"]
    target = _container(spec, container)
    mounts = [m for m in target.get("volumeMounts", []) if m.get("name") != CA_VOLUME]
    target["volumeMounts"] = mounts
    env = []
    for variable in target.get("env", []):
        if variable.get("name") == CERT_DIR:
            kept = [d for d in str(variable.get("value", "")).split(":") if d != CA_DIRECTORY]
            if kept in ([], [GO_CERT_DIR]):  # the value trusting set: gone again
                continue
            env.append({**variable, "value": ":".join(kept)})
            continue
        env.append(variable)
    target["env"] = env
    for key in ("volumeMounts", "env"):
        if not target[key]:
            del target[key]
    return changed


def _images(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def _noted(deployment: Obj) -> tuple[str, str] | None:
    """(the image before, ours) as ``imaged`` noted them; None when not (or not readably)."""
    text = (deployment["metadata"].get("annotations") or {}).get(SCHEDULER_IMAGE_ANNOTATION)
    try:
        noted = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(noted, dict) or not all(isinstance(noted.get(k), str) for k in FROM_TO):
        return None
    return str(noted["from"]), str(noted["to"])


def imaged(deployment: Obj, container: str, image: str) -> Obj:
    """The Deployment with ``container`` running ``image``, and every other container or init
    container that ran the same image (Huawei's init container does: its ``sh``); the image
    they ran noted for ``unimaged``, the first one when merged again (a copy)."""
    changed = copy.deepcopy(deployment)
    spec = changed["spec"]["template"]["spec"]
    current = str(_container(spec, container).get("image", ""))
    noted = _noted(changed)
    if current == image and (noted is None or noted[1] == image):
        return changed
    before = noted[0] if noted is not None and noted[1] == current else current
    for each in _images(spec):
        if each.get("image") == current:
            each["image"] = image
    annotations = changed["metadata"].setdefault("annotations", {})
    annotations[SCHEDULER_IMAGE_ANNOTATION] = json.dumps({"from": before, "to": image})
    return changed


def unimaged(deployment: Obj) -> Obj:
    """The Deployment running again the image ``imaged`` replaced, where it still runs ours (an
    image changed since is the user's and stays; a copy)."""
    changed = copy.deepcopy(deployment)
    noted = _noted(changed)
    annotations = changed["metadata"].get("annotations") or {}
    if SCHEDULER_IMAGE_ANNOTATION not in annotations:
        return changed
    del annotations[SCHEDULER_IMAGE_ANNOTATION]
    if not annotations:
        del changed["metadata"]["annotations"]
    if noted is not None:
        for each in _images(changed["spec"]["template"]["spec"]):
            if each.get("image") == noted[1]:
                each["image"] = noted[0]
    return changed


def _container(spec: Obj, name: str) -> Obj:
    for container in spec.get("containers", []):
        if container.get("name") == name:
            found: Obj = container
            return found
    raise NotTrusted(f"the Deployment has no container {name!r} (--scheduler-container)")


def _read(flag: str, path: Path | None) -> str | None:
    """A file's content, stripped (None without the flag); BadConfiguration naming it."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as failed:
        raise BadConfiguration(f"{flag} {path}: {failed.strerror}") from None
    if not text:
        raise BadConfiguration(f"{flag} {path} is empty")
    return text


def _trust(
    apps: client.AppsV1Api, gateway: KubernetesGateway, args: argparse.Namespace, entry: Entry
) -> bool:
    """merge: the CA ConfigMap written, the Deployment mounting it; remove: both taken out.
    False when the Deployment changed under the update (409)."""
    try:
        namespace, ca = args.namespace, _read("--ca-file", args.ca_file)
    except BadConfiguration as bad:
        raise NotTrusted(str(bad)) from None
    name = args.scheduler_deployment
    try:
        # The raw response (not the typed model): the Deployment as the API server sent it.
        raw: Any = apps.read_namespaced_deployment(name, namespace, _preload_content=False)
    except ApiException as failed:
        if failed.status == 404 and args.action == "remove":
            return True
        if failed.status == 404:
            raise NotTrusted(
                f"{namespace}/{name} not found: is Volcano installed? (--scheduler-deployment)"
            ) from None
        raise KubeError(f"get deployment {namespace}/{name}: HTTP {failed.status}") from None
    deployment: Obj = json.loads(raw.data)
    if args.action == "merge" and not entry.adapter:
        check_volcano(deployment, args.scheduler_container, args.volcano_version)
    if args.action == "merge" and ca is not None:
        body: Obj = {"metadata": {"namespace": namespace, "name": args.ca_configmap}}
        body["data"] = {"ca.crt": ca + "\n"}
        try:
            gateway.update_configmap(body)
        except NotFound:
            gateway.create_configmap(body)
    container = args.scheduler_container
    if args.action == "merge":
        changed = deployment if ca is None else trusting(deployment, container, args.ca_configmap)
        if args.scheduler_image:
            changed = imaged(changed, container, args.scheduler_image)
    else:
        changed = unimaged(untrusting(deployment, container))
    if changed != deployment:
        try:
            # Carries the resourceVersion read: a concurrent change is retried on.
            apps.replace_namespaced_deployment(name, namespace, changed, _preload_content=False)  # type: ignore[arg-type]
        except ApiException as failed:
            if failed.status == 409:
                return False
            raise KubeError(f"update deployment {namespace}/{name}: HTTP {failed.status}") from None
        image = _container(changed["spec"]["template"]["spec"], container).get("image")
        trust = "unmounted" if args.action == "remove" else "mounted" if ca else "not given"
        log.info("%s/%s: updated (the CA %s; running %s)", namespace, name, trust, image)
    if args.action == "remove":
        core = client.CoreV1Api(apps.api_client)
        try:
            core.delete_namespaced_config_map(args.ca_configmap, namespace)
        except ApiException as failed:
            if failed.status != 404:
                raise KubeError(
                    f"delete configmap {namespace}/{args.ca_configmap}: HTTP {failed.status}"
                ) from None
    return True


def run(args: argparse.Namespace) -> int:
    try:
        entry = Entry.parse(args.plugin_file.read_text(encoding="utf-8"))
        token = _read("--token-file", args.token_file)
    except OSError as failed:
        print(f"error: --plugin-file {args.plugin_file}: {failed.strerror}", file=sys.stderr)
        return 2
    except BadConfiguration as bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    if args.scheduler_image and not (args.action == "merge" and entry.adapter):
        print(
            f"error: --scheduler-image is for merging the {ADAPTER} entry: the image carries "
            "its .so, which no other vc-scheduler loads",
            file=sys.stderr,
        )
        return 2
    if token is not None:
        entry = entry.with_token(token)
    connection = api_client(args.kubeconfig)
    gateway = KubernetesGateway(connection)
    apps = client.AppsV1Api(connection)
    trust = functools.partial(_trust, apps, gateway, args, entry)
    update = functools.partial(_update, gateway, args, entry)
    try:
        # merge: the CA trusted before the https urlPrefix is used; remove: the other way.
        for step in (trust, update) if args.action == "merge" else (update, trust):
            if not any(step() for _ in range(ATTEMPTS)):
                print(f"error: kept changing under {ATTEMPTS} updates", file=sys.stderr)
                return 1
        return 0
    except NotTrusted as bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
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
    parser.add_argument(
        "--token-file",
        type=Path,
        help="merge: the service's token, written as the urlPrefix's userinfo (volcano:<token>@)",
    )
    parser.add_argument(
        "--ca-file",
        type=Path,
        help="merge: the service's CA, made trusted by Volcano's scheduler (its Deployment)",
    )
    parser.add_argument("--scheduler-deployment", default="volcano-scheduler")
    parser.add_argument("--scheduler-container", default="volcano-scheduler")
    parser.add_argument("--ca-configmap", default="ascend-npu-scheduler-ca")
    parser.add_argument(
        "--volcano-version",
        help="merge: the Volcano version its scheduler runs (default: its image's tag); "
        "before v1.13.0 merge refuses",
    )
    parser.add_argument(
        "--scheduler-image",
        help=f"merge with the {ADAPTER} entry: the vc-scheduler image carrying its .so "
        "(python -m image.vc_scheduler), set on the scheduler Deployment; remove puts the "
        "image before it back",
    )
    parser.add_argument("--kubeconfig", type=Path, help="in-cluster when not given")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
