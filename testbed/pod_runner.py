"""The project's own pods as local processes: the part of a kubelet and its container runtime
that the test bed needs to run a Deployment of the project's image on the simulated nodes.

The simulated kubelets (``simulation/node_host.py``) leave these pods alone (their
``--run-elsewhere`` selector); for each pod of the runner's selector that is bound to a node,
of the project's image, the runner does what the kubelet does, within one machine:

- The pod network: each pod gets an IP of its own, ``10.244.a.b`` (a CNI's pod CIDR), written
  to ``status.podIP``/``podIPs``; this machine reaches it at ``127.244.a.b`` (``reach``), where
  its sockets bound to the wildcard address are bound, as inside the pod's network namespace.
  (Not a loopback pod IP: the API server refuses loopback addresses in EndpointSlices,
  ``pkg/apis/core/validation`` ``ValidateEndpointIP``.) The pod's host name is its name, as
  the kubelet sets it. Both come from a ``sitecustomize`` on the process's ``PYTHONPATH``.
- The container: its ``command`` and ``args`` as a local process (``python`` is this
  interpreter), in the project's directory (the image's code); ConfigMap and Secret volumes
  written to the pod's directory and paths under their ``mountPath`` in the arguments and in
  the ConfigMaps' files (the settings) mapped there; the
  environment as declared, the downward API's ``fieldRef`` resolved
  (``pkg/fieldpath/fieldpath.go``). The ServiceAccount token is a TokenRequest bound to the
  pod, as the kubelet's projected token, given as a kubeconfig (``--kube=kubeconfig
  --kubeconfig=FILE``, which every command of the image takes) instead of the files of the
  in-cluster configuration at their fixed path.
- Probes as declared, with the kubelet's defaults and thresholds (``pkg/kubelet/prober/
  worker.go``: readiness starts failed, liveness passed; an HTTP probe passes on 200–399,
  ``pkg/probe/http/http.go``), against the pod's IP. The Ready and ContainersReady conditions
  and the container's ``ready`` follow the readiness probe (``pkg/kubelet/status/
  generate.go``); a failed liveness probe, or an exit, restarts the container after the
  kubelet's back-off (10 s doubling to 5 min, ``pkg/kubelet/kubelet.go``).
- A pod deleted gracefully: SIGTERM, up to its grace period, SIGKILL
  (``pkg/kubelet/kuberuntime/kuberuntime_container.go`` ``killContainer``), then the object
  deleted with grace 0 on its UID (``pkg/kubelet/status/status_manager.go``), as the
  simulated kubelets end theirs.
"""

from __future__ import annotations

import base64
import datetime
import itertools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.kube.client import KubernetesGateway
from infra.kube.port import Selection
from infra.kube.reflector import Change, Reflector
from testbed.control_plane import ControlPlane, kubeconfig_text
from testbed.manifests import ROOT
from testbed.rest import Obj, Rest, RestError

log = logging.getLogger(__name__)

PROJECT_IMAGE = "ascend-npu-k8s"  # the image's name (charts/ascend-npu values.yaml), any tag
POD_CIDR = "10.244"  # a /16 of pod IPs: 10.244.a.b, reached at 127.244.a.b
BACKOFF_FIRST, BACKOFF_CAP = 10.0, 300.0  # the kubelet's container restart back-off, seconds
TICK = 0.1  # seconds between looks at a pod's process and probes
STOP_GRACE = 10.0  # seconds each process gets to end when the runner stops
# Seconds a watch stays open (client-go: minutes): the watch of a stopped reflector ends with
# its window, and an API server stopping after it waits for no open watch.
WATCH_WINDOW = (2.0, 4.0)

SITECUSTOMIZE = '''"""The pod's network namespace and host name, for a process that the test bed
runs as a pod (testbed/pod_runner.py)."""
import socket

POD_ADDRESS = {address!r}  # where this machine reaches the pod's IP
POD_NAME = {name!r}
_bind = socket.socket.bind


def _pod_bind(self, address):
    # In the pod's namespace, the wildcard address is the pod's own.
    if self.family == socket.AF_INET and address[0] in ("", "0.0.0.0"):
        address = (POD_ADDRESS, *address[1:])
    return _bind(self, address)


socket.socket.bind = _pod_bind
socket.gethostname = lambda: POD_NAME
'''


def reach(pod_ip: str) -> str:
    """Where this machine reaches a pod IP of the runner's network."""
    first, rest = pod_ip.split(".", 1)
    if first != "10":
        raise ValueError(f"{pod_ip} is not a pod IP of the test bed's network ({POD_CIDR}.0.0/16)")
    return f"127.{rest}"


def image_name(image: str) -> str:
    """An image reference's name alone: no registry, tag or digest."""
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Probe:
    """An HTTP probe as declared, with the kubelet's defaults (``k8s.io/api`` core/v1)."""

    path: str
    port: int
    delay: float
    period: float
    timeout: float
    successes: int
    failures: int

    @staticmethod
    def declared(spec: Obj | None, ports: dict[str, int]) -> Probe | None:
        if spec is None:
            return None
        get = spec.get("httpGet")
        if get is None:
            raise ValueError("only httpGet probes run here")
        port = get["port"]
        return Probe(
            str(get.get("path", "/")),
            ports[port] if isinstance(port, str) else int(port),
            float(spec.get("initialDelaySeconds", 0)),
            float(spec.get("periodSeconds", 10)),
            float(spec.get("timeoutSeconds", 1)),
            int(spec.get("successThreshold", 1)),
            int(spec.get("failureThreshold", 3)),
        )

    def passes(self, address: str) -> bool:
        try:
            url = f"http://{address}:{self.port}{self.path}"
            with urllib.request.urlopen(url, timeout=self.timeout) as answer:
                return bool(200 <= answer.status < 400)
        except urllib.error.HTTPError as failed:
            return 200 <= failed.code < 400
        except OSError:
            return False


@dataclass
class ProbeState:
    """A probe's result after its thresholds, and when it is next due."""

    probe: Probe
    result: bool
    due: float
    streak: int = 0  # consecutive results against ``result``

    @staticmethod
    def of(probe: Probe | None, initial: bool, now: float) -> ProbeState | None:
        return None if probe is None else ProbeState(probe, initial, now + probe.delay)

    def changed(self, now: float, address: str) -> bool:
        """Probe ``address`` when due; whether the result changed (a liveness probe's result
        changes only to failed: a container restarts with a fresh state)."""
        return now >= self.due and self.observe(self.probe.passes(address), now)

    def observe(self, passed: bool, now: float) -> bool:
        """Take one probe's outcome; whether the result changed."""
        self.due = now + self.probe.period
        if passed == self.result:
            self.streak = 0
            return False
        self.streak += 1
        if self.streak < (self.probe.successes if passed else self.probe.failures):
            return False
        self.result, self.streak = passed, 0
        return True


def field_value(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    """A downward API ``fieldRef`` (the fields a container's env may name)."""
    meta, spec = pod["metadata"], pod["spec"]
    values = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.hostIP": host_ip,
    }
    if path not in values:
        raise ValueError(f"fieldRef {path} is not served by the test bed's pod runner")
    return str(values[path])


def environment(pod: Obj, container: Obj, pod_ip: str, host_ip: str, shim: Path) -> dict[str, str]:
    """The container's environment: what it declares, the pod's host name, and the shim."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOSTNAME": pod["metadata"]["name"],
        "PYTHONPATH": str(shim),
    }
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
        else:
            path = variable["valueFrom"]["fieldRef"]["fieldPath"]
            env[variable["name"]] = field_value(pod, path, pod_ip, host_ip)
    return env


def command_line(container: Obj, mounts: dict[str, Path], kubeconfig: Path) -> list[str]:
    """The container's command and args as a local command: ``python`` is this interpreter,
    paths under a mount are mapped to its directory, the credentials are a kubeconfig."""
    words = [*container.get("command", []), *container.get("args", [])]
    if not words:
        raise ValueError("the container declares no command (the image's entrypoint is not run)")
    if words[0] in ("python", "python3"):
        words[0] = sys.executable
    longest_first = sorted(mounts.items(), key=lambda m: len(m[0]), reverse=True)
    mapped = [next((w.replace(m, str(d)) for m, d in longest_first if m in w), w) for w in words]
    return [*mapped, "--kube=kubeconfig", f"--kubeconfig={kubeconfig}"]


def map_paths(directories: list[Path], mounts: dict[str, Path]) -> None:
    """The files of ``directories`` (a component's settings from ConfigMaps) with paths under
    a mount mapped to its directory, as ``command_line`` maps the arguments: the settings name
    the files of other volumes (the scheduler's TLS files, from Secrets)."""
    longest_first = sorted(mounts.items(), key=lambda m: len(m[0]), reverse=True)
    for directory in directories:
        for path in directory.iterdir():
            text = path.read_text()
            for mounted, local in longest_first:
                text = text.replace(f"{mounted}/", f"{local}/")
            path.write_text(text)


# ---- the kubelet's API calls ---------------------------------------------------------------


def write_volume(rest: Rest, path: str, source: Obj, directory: Path) -> None:
    """A ConfigMap's or Secret's (at ``path``) volume files: every key, or the ``items``
    chosen; a Secret's values decoded."""
    data: dict[str, str] = rest.get(path).get("data") or {}
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    directory.mkdir(parents=True, exist_ok=True)
    for item in items:
        value = data[item["key"]]
        content = base64.b64decode(value) if "/secrets/" in path else value.encode()
        (directory / item["path"]).write_bytes(content)


def pod_kubeconfig(plane: ControlPlane, pod: Obj, directory: Path) -> Path:
    """The pod's ServiceAccount token (a TokenRequest bound to the pod), as a kubeconfig."""
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    token = plane.token(meta["namespace"], account, bound_to=pod)
    path = directory / "kubeconfig"
    path.write_text(kubeconfig_text(plane.url, plane.ca.cert, {"token": token}))
    return path


def write_status(rest: Rest, pod: Obj, status: Obj) -> None:
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
    try:
        # The UID in the patch is a precondition (never another pod made under the name),
        # as the kubelet's PatchPodStatus puts it there (pkg/util/pod/pod.go).
        rest.patch(path, {"metadata": {"uid": meta["uid"]}, "status": status})
    except RestError as failed:
        log.warning("pod %s: status not written: %s", meta["name"], failed)


def delete_pod(rest: Rest, pod: Obj) -> None:
    """Delete the pod at once (grace 0), if it still has its UID."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
    try:
        rest.request("DELETE", path, body)
    except RestError as gone:
        if gone.status not in (404, 409):  # gone already, or another pod under the name
            raise


class RunningPod:
    """One pod: its container as a process, its probes, its status, its end."""

    def __init__(
        self, plane: ControlPlane, pod: Obj, pod_ip: str, host_ip: str, directory: Path
    ) -> None:
        self._plane = plane
        self._rest = plane.rest()  # a connection of its own
        self.pod = pod
        meta = pod["metadata"]
        self.key = f"{meta['namespace']}/{meta['name']}"
        self.uid = str(meta["uid"])
        self.pod_ip = pod_ip
        self._address = reach(pod_ip)
        self._host_ip = host_ip
        self.directory = directory
        (self.container,) = pod["spec"]["containers"]  # one: the runner checked
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.ready = False
        self._started_at = ""
        self._since: dict[str, tuple[str, str]] = {}  # condition → its status, and since when
        self._end = threading.Event()
        self._grace = 0.0
        self._delete = True
        self._thread = threading.Thread(target=self._run, name=f"pod {self.key}", daemon=True)

    # ---- what the runner asks -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def end(self, grace: float, delete: bool) -> None:
        """Stop it (SIGTERM, ``grace`` seconds, SIGKILL); then delete the pod if ``delete``.
        Only the first call counts (a pod being deleted is not told otherwise)."""
        if not self._end.is_set():
            self._grace, self._delete = grace, delete
            self._end.set()

    def halt(self, grace: float) -> None:
        """End it without deleting the pod (a node shutting down), within ``grace`` seconds
        for its process and a little more for its last writes."""
        self.end(grace, delete=False)
        self._thread.join(grace + 5)
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    @property
    def log(self) -> Path:
        return self.directory / "container.log"

    # ---- the pod's life -------------------------------------------------------------------

    def _run(self) -> None:
        ports = {p["name"]: int(p["containerPort"]) for p in self.container.get("ports", [])}
        try:
            ready_probe = Probe.declared(self.container.get("readinessProbe"), ports)
            live_probe = Probe.declared(self.container.get("livenessProbe"), ports)
            command, env = self._prepare()
        except (ValueError, KeyError, RestError) as failed:
            log.error("pod %s not started: %s", self.key, failed)
            return
        restart_at: float | None = 0.0  # when the container (re)starts; None: it runs
        readiness = liveness = None
        while not self._end.wait(TICK):
            now = time.monotonic()
            if restart_at is not None:
                if now >= restart_at:
                    self._start(command, env)
                    restart_at = None
                    readiness = ProbeState.of(ready_probe, False, now)
                    liveness = ProbeState.of(live_probe, True, now)
                    self._write_status()
                continue
            assert self._process is not None
            if self._process.poll() is not None:
                log.warning("pod %s: its container exited (%s)", self.key, self._process.returncode)
                restart_at = self._restart_later(now)
                continue
            if readiness is not None and readiness.changed(now, self._address):
                self._set_ready(readiness.result)
            if liveness is not None and liveness.changed(now, self._address):
                log.warning("pod %s: its liveness probe failed: restarted", self.key)
                self._kill(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
                restart_at = self._restart_later(now)
        self._kill(self._grace)
        if self._delete:
            delete_pod(self._rest, self.pod)

    def _restart_later(self, now: float) -> float:
        self._set_ready(False)
        return now + min(BACKOFF_CAP, BACKOFF_FIRST * 2.0**self.restarts)

    def _prepare(self) -> tuple[list[str], dict[str, str]]:
        """The pod's directory: its volumes, its kubeconfig and its shim."""
        mounts: dict[str, Path] = {}
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        for mount in self.container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            directory = self.directory / "volumes" / mount["name"]
            namespace = f"/api/v1/namespaces/{self.pod['metadata']['namespace']}"
            if "configMap" in volume:
                source = volume["configMap"]
                path = f"{namespace}/configmaps/{source['name']}"
                write_volume(self._rest, path, source, directory)
                mounts[mount["mountPath"]] = directory
            elif "secret" in volume:
                source = volume["secret"]
                path = f"{namespace}/secrets/{source['secretName']}"
                write_volume(self._rest, path, source, directory)
                mounts[mount["mountPath"]] = directory
            elif "projected" not in volume:  # projected: the token, given as a kubeconfig
                raise ValueError(f"volume {mount['name']}: only ConfigMaps and Secrets here")
        configured = [
            mounts[m["mountPath"]]
            for m in self.container.get("volumeMounts", [])
            if "configMap" in volumes[m["name"]]
        ]
        map_paths(configured, mounts)
        kubeconfig = pod_kubeconfig(self._plane, self.pod, self.directory)
        shim = self.directory / "shim"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "sitecustomize.py").write_text(
            SITECUSTOMIZE.format(address=self._address, name=self.pod["metadata"]["name"])
        )
        env = environment(self.pod, self.container, self.pod_ip, self._host_ip, shim)
        return command_line(self.container, mounts, kubeconfig), env

    def _start(self, command: list[str], env: dict[str, str]) -> None:
        if self._process is not None:
            self.restarts += 1
        with self.log.open("ab") as output:
            self._process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._started_at = _now()

    def _kill(self, grace: float) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _set_ready(self, ready: bool) -> None:
        if ready != self.ready:
            self.ready = ready
            self._write_status()

    def _write_status(self) -> None:
        write_status(self._rest, self.pod, self.status())

    def status(self) -> Obj:
        """The status the kubelet writes for the pod as it now is."""
        now = _now()
        ours = {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}
        kept = [c for c in self.pod["status"].get("conditions", []) if c["type"] not in ours]
        ready = "True" if self.ready else "False"
        current = {"PodReadyToStartContainers": "True", "Initialized": "True"}
        current |= {"ContainersReady": ready, "Ready": ready}
        conditions = []
        for kind, value in current.items():
            if self._since.get(kind, ("", ""))[0] != value:
                self._since[kind] = (value, now)  # a transition: when it changed
            since = self._since[kind][1]
            conditions.append({"type": kind, "status": value, "lastTransitionTime": since})
        process = self._process
        return {
            "phase": "Running",
            "hostIP": self._host_ip,
            "hostIPs": [{"ip": self._host_ip}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.pod["status"].get("startTime") or now,
            "conditions": kept + conditions,
            "containerStatuses": [
                {
                    "name": self.container["name"],
                    "image": self.container["image"],
                    "imageID": "",
                    "containerID": f"testbed://{process.pid if process else 0}",
                    "ready": self.ready,
                    "started": True,
                    "restartCount": self.restarts,
                    "state": {"running": {"startedAt": self._started_at or now}},
                }
            ],
        }


class PodRunner:
    """Runs the pods of ``selector`` (the project's image) bound to any node, as processes
    under ``workdir``, as the admin of ``plane``."""

    def __init__(self, plane: ControlPlane, selector: str, workdir: Path) -> None:
        self._plane = plane
        self._rest = plane.rest()
        self._workdir = workdir
        self._ips = (f"{POD_CIDR}.{i // 250}.{i % 250 + 1}" for i in itertools.count(1))
        self._host_ips: dict[str, str] = {}
        self.pods: dict[str, RunningPod] = {}  # by UID, until it is told to end
        self._started: list[RunningPod] = []  # every one, to halt at the end
        self._arrivals: queue.Queue[str | None] = queue.Queue()
        self._watch = Reflector(
            KubernetesGateway.from_environment(plane.admin),
            Selection("Pod", labels=selector),
            lambda pod: pod,
            on_change=self._changed,
            name="pod runner",
            window=WATCH_WINDOW,
        )
        self._worker = threading.Thread(target=self._dispatch, name="pod runner", daemon=True)

    def start(self) -> None:
        self._watch.start()
        self._worker.start()

    def _changed(self, changes: list[Change[Obj]]) -> None:
        for change in changes:
            self._arrivals.put(change.key)

    def _dispatch(self) -> None:
        while (key := self._arrivals.get()) is not None:
            pod = self._watch.get(key)
            running = next((p for p in self.pods.values() if p.key == key), None)
            if running is not None and (pod is None or pod["metadata"]["uid"] != running.uid):
                running.end(0, delete=False)  # gone at once (a force deletion)
                del self.pods[running.uid]
            if pod is None or not pod["spec"].get("nodeName"):
                continue  # not bound yet
            uid = pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp"):
                if uid in self.pods:
                    grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
                    self.pods.pop(uid).end(grace, delete=True)
                continue
            if uid in self.pods or pod["status"].get("phase") in ("Succeeded", "Failed", "Running"):
                continue  # running already (or by a runner before this one)
            images = [c["image"] for c in pod["spec"]["containers"]]
            if [image_name(i) for i in images] != [PROJECT_IMAGE]:
                log.error("pod %s: only one container of the project's image runs here", key)
                continue
            self._run(pod)

    def _run(self, pod: Obj) -> None:
        meta = pod["metadata"]
        directory = self._workdir / f"{meta['namespace']}_{meta['name']}"
        directory.mkdir(parents=True, exist_ok=True)
        running = RunningPod(self._plane, pod, next(self._ips), self._host_ip(pod), directory)
        self.pods[running.uid] = running
        self._started.append(running)
        running.start()
        log.info("pod %s runs at %s", running.key, running.pod_ip)

    def _host_ip(self, pod: Obj) -> str:
        node = pod["spec"]["nodeName"]
        if node not in self._host_ips:
            addresses = self._rest.get(f"/api/v1/nodes/{node}")["status"].get("addresses", [])
            internal = [a["address"] for a in addresses if a["type"] == "InternalIP"]
            self._host_ips[node] = internal[0] if internal else ""
        return self._host_ips[node]

    def stop(self) -> None:
        """Stop every process (as a node shutting down: the pods' objects stay)."""
        self._arrivals.put(None)
        self._worker.join(timeout=5)
        self._watch.stop()
        for running in self._started:
            running.end(STOP_GRACE, delete=False)
        for running in self._started:
            running.halt(STOP_GRACE)
