"""Deployment: SuperLink and SuperNodes as separate processes over TLS on loopback.

* ``test_compose_file_*``: ``docker/compose.yml`` validates with ``docker-compose config`` and
  is consistent (ports, volumes, one partition per SuperNode) and safe to leave running (the
  SuperLink's port on 127.0.0.1 unless ``SUPERLINK_BIND_ADDRESS``, SuperNode authentication
  with each private key in its SuperNode only, TLS private keys only where they are used). No
  Docker engine is needed.
* ``test_compose_federation_*`` (e2e): runs the compose file's own command lines (SuperLink,
  its ``register`` script, SuperExec for the ServerApp, two authenticated SuperNodes and their
  SuperExecs, isolation ``process``),
  with loopback addresses, free ports and temporary folders in place of ``/app/...``, then two
  rounds of FedAvg through ``flwr run``.
* ``test_killed_supernode_*`` (e2e): the multi-machine commands of docs/deploy.md (isolation
  ``subprocess``, CLI-managed SuperNode authentication): a SuperNode killed during a run, the
  run finishing with the other one, the restarted SuperNode accepted by the next run, and a
  SuperNode whose data folder is missing reported in the run's log.

Every process is started in its own session and stopped by its PID (process group) in a
``finally`` block, also when the test fails.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from flowerbed.catalog import parse_run_config
from flowerbed.data.splits import DataNotFoundError
from flowerbed.settings import ConfigError
from flowerbed.simulation import OFFLINE_ENV, format_run_config, free_port
from flowerbed.training.local_client import LocalClient

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker" / "compose.yml"
BIN = Path(sys.executable).parent
FLWR = str(BIN / "flwr")
NODE_SERVICES = ("supernode-1", "supernode-2", "supernode-3")
LOOPBACK_SERVICES = (  # what the loopback test runs of the compose file (two SuperNodes)
    "superlink",
    "superexec-serverapp",
    "supernode-1",
    "superexec-clientapp-1",
    "supernode-2",
    "superexec-clientapp-2",
)


# --- compose file ------------------------------------------------------------------------------


def compose_services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def command_line(service: dict) -> list[str]:
    """Entrypoint + command of a compose service, as one argv."""
    return [str(arg) for arg in [*service["entrypoint"], *service["command"]]]


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def node_config(argv: list[str]) -> dict:
    from flwr.common.config import parse_config_args

    return parse_config_args([option(argv, "--node-config")])


def to_loopback(argv: list[str], ports: dict[int, int], root: Path) -> list[str]:
    """A compose command line rewritten for one host: service names -> 127.0.0.1, compose ports
    -> free ports, ``/app/...`` -> folders under ``root``; the executable from this venv."""
    out = [str(BIN / argv[0])]
    for previous, token in itertools.pairwise(argv):
        if previous == "--port":
            token = str(ports[int(token)])
        elif previous == "--host":
            token = "127.0.0.1"
        else:
            token = re.sub(
                r"\b(?:superlink|supernode-\d+):(\d+)\b",
                lambda m: f"127.0.0.1:{ports[int(m[1])]}",
                token,
            )
            token = token.replace("/app/", f"{root}/")
        out.append(token)
    return out


def volumes(service: dict) -> list[dict]:
    """A service's volumes as dicts (source, target, read_only, type), from either the short
    form (docker-compose 1.x prints ``src:dst:ro``) or the long form (Compose v2)."""
    out = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *mode = volume.split(":")
            kind = "bind" if source.startswith(("/", ".")) else "volume"
            volume = {"type": kind, "source": source, "target": target, "read_only": "ro" in mode}
        out.append({"read_only": False, **volume})
    return out


def published_ports(service: dict) -> dict[int, tuple[str, int]]:
    """``{container port: (host address, host port)}`` from short (``"8000:8000"``,
    ``"127.0.0.1:8000:8000/tcp"``) or long port entries; no address means every interface."""
    out = {}
    for port in service.get("ports", []):
        if isinstance(port, dict):
            address = port.get("host_ip", "0.0.0.0")
            out[int(port["target"])] = (address, int(port["published"]))
        else:
            parts = str(port).split("/")[0].split(":")
            address = parts[0] if len(parts) == 3 else "0.0.0.0"
            out[int(parts[-1])] = (address, int(parts[-2] if len(parts) > 1 else parts[-1]))
    return out


def docker_compose_config(**environment: str) -> dict:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (CI installs Debian's docker-compose)")
    proc = subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        check=False,
        capture_output=True,
        text=True,
        cwd=COMPOSE.parent,
        timeout=120,
        env={**os.environ, **environment},
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def mounts(service: dict) -> dict[str, str]:
    """``{container folder: host source}`` of a service's volumes."""
    return {v["target"]: v["source"] for v in volumes(service)}


def host_source(service: dict, path: str) -> str:
    """The host file or folder behind ``path`` in a service's container (its volumes)."""
    for target, source in sorted(mounts(service).items(), key=lambda item: -len(item[0])):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return source + path[len(target) :]
    raise AssertionError(f"{path} is in no volume of {sorted(mounts(service))}")


def sees(service: dict, host_path: str) -> bool:
    """Whether a service's container has ``host_path`` (a host file) in one of its volumes."""
    return any(
        host_path == source or host_path.startswith(source.rstrip("/") + "/")
        for source in mounts(service).values()
    )


def test_compose_file_validates_and_ports_and_volumes_agree():
    config = docker_compose_config()
    services = config["services"]
    expected = {
        "init",
        "register",
        "superlink",
        "superexec-serverapp",
        *NODE_SERVICES,
        "superexec-clientapp-1",
        "superexec-clientapp-2",
        "superexec-clientapp-3",
    }
    assert set(services) == expected
    raw = compose_services()
    for name in expected - {"init"}:  # docker-compose config keeps every command line as written
        assert command_line(services[name]) == command_line(raw[name]), name

    # the SuperLink: TLS, process isolation, no runtime dependency installation, its port
    # published on the host at the address of the `docker` connection in docs/deploy.md
    link = command_line(services["superlink"])
    assert link[0] == "flower-superlink" and "--insecure" not in link
    assert {"--ssl-ca-certfile", "--ssl-certfile", "--ssl-keyfile"} <= set(link)
    assert option(link, "--isolation") == "process"
    assert "--disable-runtime-dependency-installation" in link
    port = int(option(link, "--port"))
    # on the host's loopback only, unless SUPERLINK_BIND_ADDRESS says otherwise
    assert published_ports(services["superlink"]) == {port: ("127.0.0.1", port)}
    everywhere = docker_compose_config(SUPERLINK_BIND_ADDRESS="0.0.0.0")["services"]
    assert published_ports(everywhere["superlink"]) == {port: ("0.0.0.0", port)}
    deploy = (REPO / "docs" / "deploy.md").read_text()
    assert f'address = "127.0.0.1:{port}"' in deploy.split("[superlink.docker]", 1)[1][:200]
    assert services["superlink"]["image"].startswith("flwr/superlink:")

    serverapp = command_line(services["superexec-serverapp"])
    assert serverapp[0] == "flower-superexec"
    assert option(serverapp, "--runtime-api-address") == f"superlink:{port}"

    partitions = []
    for i, name in enumerate(NODE_SERVICES, start=1):
        node = command_line(services[name])
        assert node[0] == "flower-supernode" and "--insecure" not in node
        assert services[name]["image"].startswith("flwr/supernode:")
        assert option(node, "--superlink") == f"superlink:{port}"
        assert option(node, "--isolation") == "process"
        config_ = node_config(node)
        assert config_["num-partitions"] == len(NODE_SERVICES)
        partitions.append(config_["partition-id"])
        # its SuperExec reaches the SuperNode's Runtime API at the port the SuperNode listens on
        clientapp = command_line(services[f"superexec-clientapp-{i}"])
        assert option(clientapp, "--runtime-api-address") == f"{name}:{option(node, '--port')}"
        assert option(node, "--host") == "0.0.0.0"
        # the site's data folder is mounted where its ClientApps run (the SuperExec), read-only
        targets = {v["target"]: v for v in volumes(services[f"superexec-clientapp-{i}"])}
        assert config_["data-dir"] in targets and targets[config_["data-dir"]]["read_only"]
    assert sorted(partitions) == list(range(len(NODE_SERVICES)))

    # SuperNode authentication: the SuperLink accepts registered keys only (and keeps them in
    # its database); each SuperNode's private key is in its container only; the `register`
    # service registers the public keys (it sees no private key) before any SuperNode starts
    assert "--enable-supernode-auth" in link
    database = option(link, "--database")  # in a named volume: it outlives the container
    assert [
        v["type"] for v in volumes(services["superlink"]) if database.startswith(v["target"])
    ] == ["volume"]
    assert command_line(services["register"])[-3:-1] == [f"superlink:{port}", "/app/keys"]
    register_keys = host_source(services["register"], "/app/keys")
    assert register_keys == host_source(services["init"], "/app/keys") + "/public"
    assert services["register"]["depends_on"] == {"superlink": {"condition": "service_started"}}
    assert services["init"]["environment"]["SUPERNODES"].split() == list(NODE_SERVICES)
    for name in NODE_SERVICES:
        node = command_line(services[name])
        key = host_source(services[name], option(node, "--auth-supernode-private-key"))
        assert key.startswith(host_source(services["init"], "/app/keys") + "/")
        assert {other for other in services if sees(services[other], key)} == {"init", name}
        assert services[name]["depends_on"] == {
            "register": {"condition": "service_completed_successfully"}
        }
    assert not any(
        sees(services["register"], host_source(services[n], "/app/keys")) for n in NODE_SERVICES
    )
    # TLS private keys: the SuperLink's in the SuperLink only, the Runtime API's in the
    # SuperNodes only; the folder every service mounts holds the CA certificate alone
    server_key = host_source(services["superlink"], option(link, "--ssl-keyfile"))
    assert {name for name in services if sees(services[name], server_key)} == {"init", "superlink"}
    runtime_key = host_source(
        services["supernode-1"], option(command_line(services["supernode-1"]), "--ssl-keyfile")
    )
    assert {name for name in services if sees(services[name], runtime_key)} == {
        "init",
        *NODE_SERVICES,
    }
    for name in set(services) - {"init"}:
        ca = host_source(services[name], "/app/certificates/ca.crt")
        assert not server_key.startswith(str(Path(ca).parent) + "/"), name

    # every file a command names lies in a volume mounted into that service (the node-config
    # data-dir is read by the ClientApps, in the SuperExec's container: checked above)
    for name, service in services.items():
        if name == "init":
            continue
        targets = [v["target"] for v in volumes(service)]
        argv = command_line(service)
        for previous, arg in itertools.pairwise(["", *argv]):
            if previous == "--node-config":
                continue
            for path in re.findall(r"/app/[\w./-]+", arg):
                assert any(path.startswith(t.rstrip("/") + "/") or path == t for t in targets), (
                    f"{name}: {path} is not in a mounted volume {targets}"
                )
    # the `init` service writes the certificates and keys into the folders the others mount
    init_sources = [v["source"] for v in volumes(services["init"]) if v["type"] == "bind"]
    for name in set(services) - {"init"}:
        for volume in volumes(services[name]):
            if volume["type"] == "bind" and volume["target"].startswith(
                ("/app/certificates", "/app/keys", "/app/superl")
            ):
                assert any(
                    volume["source"] == source or volume["source"].startswith(source + "/")
                    for source in init_sources
                ), (name, volume)
    # results persist in a named volume at the ServerApp's default output-dir (~ = /app)
    runs = [v for v in volumes(services["superexec-serverapp"]) if v["type"] == "volume"]
    assert [v["target"] for v in runs] == ["/app/.flowerbed/runs"]
    assert services["superexec-serverapp"]["build"]["dockerfile"] == "docker/Dockerfile"


def test_dockerfile_builds_on_flowers_superexec_image_and_disables_dependency_installation():
    text = (REPO / "docker" / "Dockerfile").read_text()
    assert re.search(r"^FROM flwr/superexec:\$\{FLWR_VERSION\}", text, re.MULTILINE)
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in text
    assert 'ENTRYPOINT ["flower-superexec"]' in text


def test_compose_commands_map_to_loopback():
    services = compose_services()
    ports = {8000: 1111, 9094: 2222, 9095: 3333, 9096: 4444}
    argv = to_loopback(command_line(services["supernode-2"]), ports, Path("/tmp/x"))
    assert argv[0] == str(BIN / "flower-supernode")
    assert option(argv, "--superlink") == "127.0.0.1:1111"
    assert option(argv, "--port") == "3333" and option(argv, "--host") == "127.0.0.1"
    assert option(argv, "--root-certificates") == "/tmp/x/certificates/ca.crt"
    assert node_config(argv)["data-dir"] == "/tmp/x/data/site-2"


# --- scripts -----------------------------------------------------------------------------------


def make_certs(folder: Path) -> Path:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "make_certs.sh"), str(folder)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return folder


def make_node_keys(folder: Path, *names: str) -> Path:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "make_node_keys.sh"), str(folder), *names],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return folder


def tls_superlink(certs: Path, port: int, *extra: str) -> list[str]:
    """The SuperLink command of docs/deploy.md on 127.0.0.1:``port`` with ``certs``' TLS."""
    return [
        str(BIN / "flower-superlink"),
        "--ssl-ca-certfile",
        str(certs / "ca.crt"),
        "--ssl-certfile",
        str(certs / "server.pem"),
        "--ssl-keyfile",
        str(certs / "server.key"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--disable-runtime-dependency-installation",
        *extra,
    ]


def tls_supernode(certs: Path, port: int, node_config: str, *extra: str) -> list[str]:
    """A site's SuperNode command of docs/deploy.md, for the SuperLink on 127.0.0.1:``port``."""
    return [
        str(BIN / "flower-supernode"),
        "--root-certificates",
        str(certs / "ca.crt"),
        "--superlink",
        f"127.0.0.1:{port}",
        "--port",
        str(free_port()),
        "--node-config",
        node_config,
        *extra,
    ]


def test_scripts_make_a_ca_signed_server_certificate_and_openssh_ec_node_keys(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import (
        load_ssh_private_key,
        load_ssh_public_key,
    )

    certs = make_certs(tmp_path / "certs")
    verify = subprocess.run(
        [
            "openssl",
            "verify",
            "-CAfile",
            str(certs / "ca.crt"),
            str(certs / "server.pem"),
            str(certs / "supernode-runtime.pem"),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr
    cert = x509.load_pem_x509_certificate((certs / "server.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "superlink"} <= set(names.get_values_for_type(x509.DNSName))
    assert oct((certs / "server.key").stat().st_mode & 0o777) == "0o600"
    keys = make_node_keys(tmp_path / "keys", "site-a")
    # exactly what flower-supernode and `flwr supernode register` load
    private = load_ssh_private_key((keys / "site-a").read_bytes(), None)
    public = load_ssh_public_key((keys / "site-a.pub").read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()


# --- a site's own data folder (node-config data-dir) --------------------------------------------


def node_context(tmp_path, node_config: dict, **run_config):
    from flwr.app import Context, RecordDict

    from flowerbed.inprocess import resolve_run_config

    config = resolve_run_config({"data-dir": str(tmp_path / "server-data"), **run_config})
    return Context(
        run_id=1, node_id=7, node_config=node_config, state=RecordDict(), run_config=config
    )


def test_node_data_dir_overrides_the_run_config_data_dir(tmp_path):
    site = tmp_path / "site-1"
    site.mkdir()
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 40), ("val", 10), ("test", 10)):  # the MedMNIST .npz layout
        arrays[f"{split}_images"] = rng.integers(0, 255, (n, 28, 28, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 8, (n, 1))
    np.savez(site / "bloodmnist.npz", **arrays)
    context = node_context(
        tmp_path,
        {"partition-id": 0, "num-partitions": 2, "data-dir": str(site)},
        dataset="bloodmnist",
        partitioner="iid",
        model="mlp",
    )
    client = LocalClient.from_context(context, parse_run_config(context.run_config))
    assert client.config.data_path == site  # the run config named another (empty) folder
    assert len(client.y_train) + len(client.y_test) == 20  # half of the site's 40 samples


def test_missing_or_relative_node_data_dir_is_a_clear_error(tmp_path):
    missing = tmp_path / "not-there"
    context = node_context(
        tmp_path, {"partition-id": 0, "num-partitions": 2, "data-dir": str(missing)}
    )
    with pytest.raises(
        DataNotFoundError,
        match=f"data folder {missing} .node-config data-dir. does not exist on this SuperNode",
    ):
        LocalClient.from_context(context, parse_run_config(context.run_config))
    context.node_config["data-dir"] = "data/site-1"
    with pytest.raises(ConfigError, match="must be an absolute path"):
        LocalClient.from_context(context, parse_run_config(context.run_config))


# --- processes ---------------------------------------------------------------------------------


class Federation:
    """Processes of one federation on loopback; ``stop()`` ends every one by its PID."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "flwr-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **OFFLINE_ENV, "FLWR_HOME": str(self.home)}
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        self.logs[name] = self.root / f"{name}.log"
        with open(self.logs[name], "w") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.root,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Stop one process and its children (its process group), by its PID."""
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)

    def stop(self) -> None:
        """SIGTERM to every process group at once, then wait; SIGKILL whatever is left."""
        procs = list(self.procs.values())
        self.procs.clear()
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # also stray children of an exited leader
            except ProcessLookupError:
                pass
            if proc.poll() is None:
                proc.wait(timeout=15)

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def connect(self, name: str, address: str, ca_cert: Path) -> str:
        with open(self.home / "config.toml", "a") as f:
            f.write(
                f'\n[superlink.{name}]\naddress = "{address}"\nroot-certificates = "{ca_cert}"\n'
            )
        return name

    def flwr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [FLWR, *args],
            check=False,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )

    def wait_for_port(self, port: int, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.procs[name].poll() is None, f"{name} exited:\n{self.log(name)[-3000:]}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"{name} does not listen on {port}:\n{self.log(name)[-3000:]}")

    def wait_for_nodes(self, connection: str, count: int, timeout: float = 180) -> list[int]:
        """Wait until ``count`` SuperNodes are online; returns their node ids."""
        deadline = time.monotonic() + timeout
        online: list[int] = []
        while time.monotonic() < deadline:
            proc = self.flwr("supernode", "list", connection, "--format", "json")
            if proc.returncode == 0 and "{" in proc.stdout:
                nodes = json.loads(proc.stdout[proc.stdout.index("{") :]).get("nodes", [])
                online = [int(n["node-id"]) for n in nodes if n.get("status") == "online"]
                if len(online) >= count:
                    return online
            time.sleep(1)
        logs = "\n".join(f"--- {n}\n{self.log(n)[-1500:]}" for n in self.procs)
        raise TimeoutError(f"only {online} of {count} SuperNodes online:\n{logs}")


class FlwrRun:
    """``flwr run <app> <connection> --stream`` in the background, its output collected."""

    def __init__(self, federation: Federation, connection: str, run_config: dict) -> None:
        argv = [
            FLWR,
            "run",
            str(REPO),
            connection,
            "--stream",
            "--run-config",
            format_run_config(run_config),
        ]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=federation.env,
            cwd=REPO,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.log):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in the run's log:\n{self.log[-4000:]}")
            time.sleep(0.2)

    def finish(self, timeout: float) -> int:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:  # stop `flwr run` (by its PID) before failing
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
            self.reader.join(timeout=10)
        return self.proc.returncode

    def history(self) -> list[dict]:
        found = re.findall(r"flowerbed: results go to (\S+)", self.log)
        assert found, f"the run wrote no results; its log ends with:\n{self.log[-4000:]}"
        return json.loads((Path(found[-1]) / "history.json").read_text())


# --- e2e ---------------------------------------------------------------------------------------


def demo_secrets(root: Path, nodes: tuple[str, ...]) -> None:
    """What the compose file's ``init`` service makes (docker/init-secrets.sh), where its
    command lines look for it once ``/app`` is ``root``: the CA certificate in certificates/,
    the SuperLink's and the Runtime API's certificates and keys in folders of their own, one
    SuperNode key pair per node in keys/, the SuperLink's database folder."""
    certs = make_certs(root / "certificates")
    for folder, names in (("superlink-tls", "server"), ("supernode-tls", "supernode-runtime")):
        (root / folder).mkdir()
        for suffix in (".pem", ".key"):
            (certs / f"{names}{suffix}").rename(root / folder / f"{names}{suffix}")
    make_node_keys(root / "keys", *nodes)
    (root / "superlink-state").mkdir()


@pytest.mark.e2e
def test_compose_federation_over_tls_runs_two_rounds_of_fedavg(federation, tmp_path):
    services = compose_services()
    demo_secrets(tmp_path, ("supernode-1", "supernode-2"))
    ports = {8000: free_port(), 9094: free_port(), 9095: free_port()}
    for site in ("site-1", "site-2"):  # the SuperNodes' own data folders (node-config data-dir)
        (tmp_path / "data" / site).mkdir(parents=True)
    commands = {
        name: to_loopback(command_line(services[name]), ports, tmp_path)
        for name in (*LOOPBACK_SERVICES, "register")
    }
    federation.start("superlink", commands["superlink"])
    federation.wait_for_port(ports[8000], "superlink")
    # the `register` service's script, with its compose arguments: both keys, then again
    # (a SuperLink that knows them already, as after a restart with its database)
    register = ["bash", str(REPO / "docker" / "register-supernodes.sh"), *commands["register"][2:]]
    env = {**federation.env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for expected in ("registered", "registered before"):
        proc = subprocess.run(
            register, check=False, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.splitlines() == [
            f"{tmp_path}/keys/supernode-{i}.pub: {expected}" for i in (1, 2)
        ], proc.stdout
    for name in LOOPBACK_SERVICES[1:]:
        federation.start(name, commands[name])
    connection = federation.connect(
        "loopback", f"127.0.0.1:{ports[8000]}", tmp_path / "certificates" / "ca.crt"
    )
    federation.wait_for_nodes(connection, 2)

    run = FlwrRun(
        federation,
        connection,
        {
            "num-server-rounds": 2,
            "local-epochs": 1,
            "fraction-evaluate": 0.0,
            "output-dir": str(tmp_path / "runs"),
            "round-timeout": 300.0,
        },
    )
    assert run.finish(timeout=600) == 0, run.log[-4000:]
    history = run.history()
    assert [row["round"] for row in history] == [0, 1, 2]
    for row in history[1:]:
        assert row["clients_trained"] == 2 and row["clients_failed"] == 0, row
    assert history[-1]["central_accuracy"] > history[0]["central_accuracy"]
    run_dir = next((tmp_path / "runs").iterdir())
    assert {"config.json", "history.json", "history.csv", "model.pt", "partitions.csv"} <= {
        p.name for p in run_dir.iterdir()
    }
    assert json.loads((run_dir / "config.json").read_text())["num-partitions"] == 3
    # TLS on every API of the SuperLink and of the SuperNodes' Runtime APIs
    assert f"Uvicorn running on https://127.0.0.1:{ports[8000]}" in federation.log("superlink")
    assert f"running on https://127.0.0.1:{ports[9094]}" in federation.log("supernode-1")


@pytest.mark.e2e
def test_killed_supernode_run_finishes_restart_is_accepted_missing_data_is_reported(
    federation, tmp_path
):
    certs = make_certs(tmp_path / "certificates")
    keys = make_node_keys(tmp_path / "keys", "site-a", "site-b", "site-c")
    port = free_port()
    # the multi-machine commands of docs/deploy.md, all on 127.0.0.1
    federation.start("superlink", tls_superlink(certs, port, "--enable-supernode-auth"))
    federation.wait_for_port(port, "superlink")
    connection = federation.connect("site-test", f"127.0.0.1:{port}", certs / "ca.crt")
    for site in ("site-a", "site-b", "site-c"):  # CLI-managed SuperNode authentication
        proc = federation.flwr("supernode", "register", str(keys / f"{site}.pub"), connection)
        assert proc.returncode == 0 and "registered successfully" in proc.stdout, proc.stdout

    def supernode(site: str, partition: int, *extra: str) -> list[str]:
        node_config = " ".join([f"partition-id={partition} num-partitions=3", *extra])
        return tls_supernode(
            certs, port, node_config, "--auth-supernode-private-key", str(keys / site)
        )

    federation.start("site-a", supernode("site-a", 0))
    site_b = supernode("site-b", 1)
    federation.start("site-b", site_b)
    first_nodes = federation.wait_for_nodes(connection, 2)

    # run 1: site-b dies (SIGKILL) after the handshake; min-available-clients=1, so the run goes
    # on with site-a instead of waiting for a second node. site-b's missing reply counts as a
    # failure: the SuperLink answers "Node Unavailable" once site-b misses its heartbeats
    # (Flower: 2 x 30 s), before round-timeout (a safety net for a loaded machine)
    common = {"local-epochs": 1, "fraction-evaluate": 0.0, "output-dir": str(tmp_path / "runs")}
    run = FlwrRun(
        federation,
        connection,
        {**common, "num-server-rounds": 2, "min-available-clients": 1, "round-timeout": 300.0},
    )
    run.wait_for(r"flowerbed: results go to", timeout=400)
    federation.kill("site-b")
    assert run.finish(timeout=700) == 0, run.log[-4000:]
    history = run.history()
    assert [row["round"] for row in history] == [0, 1, 2]
    assert all(row["clients_trained"] == 1 for row in history[1:]), history
    assert history[1]["clients_failed"] == 1, history[1]
    assert "Node Unavailable" in history[1]["failures"][0], history[1]

    # run 2: site-b restarted (same key -> same registered node), site-c whose data folder is
    # missing; min-available-clients=3: all three take part, site-c's error is in the log
    missing = tmp_path / "no-such-folder"
    federation.start("site-b", site_b)
    federation.start("site-c", supernode("site-c", 2, f"data-dir='{missing}'"))
    nodes = federation.wait_for_nodes(connection, 3)
    assert set(first_nodes) <= set(nodes)
    run = FlwrRun(
        federation,
        connection,
        {**common, "num-server-rounds": 1, "min-available-clients": 3, "round-timeout": 300.0},
    )
    assert run.finish(timeout=600) == 0, run.log[-4000:]
    row = run.history()[1]
    assert row["clients_trained"] == 2 and row["clients_failed"] == 1, row
    message = f"data folder {missing} (node-config data-dir) does not exist on this SuperNode"
    assert message in row["failures"][0] and message in run.log
