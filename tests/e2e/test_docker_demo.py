"""The docker compose demo (``docker/compose.yml``) built and run on a private Docker engine.

Marked ``docker`` and left out of the default ``pytest`` run (``addopts`` in pyproject.toml): a
first run builds images for many minutes. Run it as root with
``pytest -m docker -s tests/e2e/test_docker_demo.py``. It skips only where ``dockerd`` cannot
run (not root, no overlay file system) or the Docker clients are missing.

1. A private ``dockerd`` (overlay2, no iptables, no bridge network: containers use the host's
   network) keeps its images in ``$FLOWERBED_DOCKER_CACHE`` (default
   ``~/.cache/flowerbed/docker``), so that later runs reuse them; its socket and run state
   lie in a temporary folder.
2. Public image registries are out of reach: a Debian base image is made once with
   ``debootstrap`` and ``docker import``, and ``docker/standins.Dockerfile`` builds stand-ins
   for ``flwr/superlink``, ``flwr/supernode`` and ``flwr/superexec`` (the Flower version the
   compose file names, from PyPI) under the official names. ``docker/compose.yml`` and
   ``docker/Dockerfile`` are used unchanged.
3. In a copy of the repository's files that the images and the compose file use,
   ``docker-compose -f docker/compose.yml -f <override> up -d``: the override puts every
   service on the host's network, rewrites the compose command lines to loopback addresses and
   free ports (``to_loopback`` of tests/test_deployment.py), builds on the host's network and
   passes the build options: this machine's CA bundle for pip (``docker/build-ca/``) and, when
   a CPU-only torch wheel lies in ``PIP_FIND_LINKS``, that wheel (served on loopback) in place
   of PyTorch's wheel index.
4. ``flwr run . docker --run-config "num-server-rounds=2"`` over TLS (the CA the compose
   ``init`` service made) once the three SuperNodes are online (authenticated with the keys
   ``init`` made and ``register`` registered), then the results folder is copied out of the
   ServerApp's container and checked: rounds 0..2, finite accuracies, three clients trained
   per round; the ``register`` service's log shows the three keys registered.
5. ``down -v``, the engine stopped by its PID, the copy with its certificates and keys deleted.

Every phase's wall time is printed (``-s``) for docs/deploy.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from test_deployment import (
    REPO,
    Federation,
    FlwrRun,
    command_line,
    compose_services,
    option,
    to_loopback,
)

from flowerbed.simulation import free_port

pytestmark = pytest.mark.docker

CACHE = Path(os.environ.get("FLOWERBED_DOCKER_CACHE", "~/.cache/flowerbed/docker")).expanduser()
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_IMAGE = f"flowerbed-test/debian:{DEBIAN_SUITE}"
STANDIN_PYTHON = "cp311"  # Debian bookworm's python3: the wheel tag a local torch must have
STANDINS = ("superlink", "supernode", "superexec")
PROJECT = "flowerbed-docker-test"
# the local torch wheel's address is a build argument, part of the build cache's key: a fixed
# port (below Linux's ephemeral range) keeps the installed dependencies cached between runs
WHEEL_PORT = 28931
# what docker/Dockerfile and docker/compose.yml read from the repository (the build context)
BUILD_FILES = ("pyproject.toml", "README.md", "flowerbed", "scripts", "docker")
# what the compose `init` service writes into docker/ (docker/init-secrets.sh): never copied
# into the demo, deleted with it
DEMO_SECRETS = ("certificates", "ca-private", "superlink-tls", "supernode-tls", "keys")


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "dockerd needs root"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlay file system (dockerd's overlay2 storage driver)"
    for tool in ("dockerd", "docker", "docker-compose"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install docker.io docker-compose)"
    return None


class DockerEngine:
    """A ``dockerd`` of this test's own: data root in ``data_root`` (images kept between runs),
    socket and run state in ``run_dir``; ``stop()`` ends it by its PID."""

    def __init__(self, data_root: Path, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.socket = run_dir / "docker.sock"
        self.log = run_dir / "dockerd.log"
        self.env = {
            **os.environ,
            "DOCKER_HOST": f"unix://{self.socket}",
            "DOCKER_BUILDKIT": "0",  # the builder that dockerd 20.10 and docker-compose 1.29 share
            "COMPOSE_DOCKER_CLI_BUILD": "0",
        }
        argv = [
            "dockerd",
            "--data-root",
            str(data_root),
            "--exec-root",
            str(run_dir / "exec"),
            "--pidfile",
            str(run_dir / "dockerd.pid"),
            "-H",
            f"unix://{self.socket}",
            "--storage-driver",
            "overlay2",
            "--iptables=false",
            "--ip-masq=false",
            "--bridge=none",
        ]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 90
        while self.docker("version", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dockerd did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def run(self, argv: list[str], check: bool = True, timeout: float = 120, **kwargs):
        proc = subprocess.run(
            argv,
            check=False,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}{proc.stderr}")
        return proc

    def docker(self, *args: str, check: bool = True, timeout: float = 120):
        return self.run(["docker", *args], check=check, timeout=timeout)

    def has_image(self, name: str) -> bool:
        return self.docker("image", "inspect", name, check=False).returncode == 0

    def stop(self) -> None:
        """SIGTERM (dockerd stops its containerd), SIGKILL to the group after 60 s."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # a containerd left behind
        # dockerd leaves its default network namespace mounted in the run folder
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{self.run_dir}/")), reverse=True):
            subprocess.run(["umount", mount], check=False)


def make_debian_image(engine: DockerEngine) -> None:
    """``debootstrap`` a minimal Debian into the cache, ``docker import`` it, delete the tree."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: apt-get install debootstrap")
    rootfs = CACHE / "debootstrap"
    shutil.rmtree(rootfs, ignore_errors=True)
    try:
        argv = ["debootstrap", "--variant=minbase", "--include=ca-certificates"]
        engine.run([*argv, DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR], timeout=1800)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        engine.run(["docker", "import", "-", DEBIAN_IMAGE], stdin=tar.stdout, timeout=600)
        assert tar.wait(timeout=60) == 0
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def copy_build_files(dest: Path) -> None:
    """The files the images and the compose file use, and this machine's CA bundle for pip
    (the file ``PIP_CERT`` names, when set) as a build option in ``docker/build-ca/``."""
    ignore = shutil.ignore_patterns(*DEMO_SECRETS, "__pycache__", "*.crt")
    dest.mkdir(parents=True)
    for name in BUILD_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    ca_bundle = os.environ.get("PIP_CERT")
    if ca_bundle and Path(ca_bundle).is_file():
        shutil.copy(ca_bundle, dest / "docker" / "build-ca" / "host-ca-bundle.crt")
    for site in ("server", "site-1", "site-2", "site-3"):  # the compose file's data folders
        (dest / "data" / site).mkdir(parents=True)


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def local_torch_wheel() -> Path | None:
    """A CPU-only torch wheel for the stand-ins' Python in a ``PIP_FIND_LINKS`` folder."""
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        wheels = sorted(Path(folder).glob(f"torch-*+cpu-{STANDIN_PYTHON}-*linux*.whl"))
        if wheels:
            return wheels[-1]
    return None


@contextlib.contextmanager
def torch_pip_args(tmp_path: Path):
    """``TORCH_PIP_ARGS`` for docker/Dockerfile: a local CPU torch wheel served on loopback
    (the build runs on the host's network), or ``None`` for the Dockerfile's default (PyTorch's
    CPU wheel index)."""
    wheel = local_torch_wheel()
    if wheel is None:
        yield None
        return
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / wheel.name).symlink_to(wheel)
    port = WHEEL_PORT if port_is_free(WHEEL_PORT) else free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        version = wheel.name.split("-")[1]
        yield f"--find-links http://127.0.0.1:{port}/ torch=={version}"
    finally:
        server.terminate()
        server.wait(timeout=15)


def host_network_override(services: dict, ports: dict[int, int], build_args: dict) -> dict:
    """Every service on the host's network; compose command lines with loopback addresses and
    free ports (``/app/...`` paths stay: they are inside the containers); images built on the
    host's network with ``build_args``; one math thread per ServerApp and ClientApp."""
    override = {}
    for name, service in services.items():
        entry: dict = {"network_mode": "host"}
        if "command" in service:
            argv = to_loopback(command_line(service), ports, Path("/app"))
            entry["command"] = argv[len(service["entrypoint"]) :]
        if "build" in service:
            entry["build"] = {"context": "..", "network": "host", "args": dict(build_args)}
            # three sites' ClientApps share this host's cores: one math thread each
            entry["environment"] = {"OMP_NUM_THREADS": "1"}
        override[name] = entry
    return {"services": override}


def standin_images(resolved: dict) -> dict[str, str]:
    """``{"superlink": "flwr/superlink:1.42.0", ...}``: the images the resolved compose file
    names, and the base image of docker/Dockerfile for the same Flower version."""
    names = {s["image"] for s in resolved["services"].values() if s["image"].startswith("flwr/")}
    images = {name.split("/")[1].split(":")[0]: name for name in names}
    version = images["superlink"].split(":")[1]
    return {**images, "superexec": f"flwr/superexec:{version}"}


def build_standins(engine: DockerEngine, context: Path, images: dict[str, str]) -> None:
    for target in STANDINS:
        engine.docker(
            "build",
            "--network",
            "host",
            "-f",
            str(context / "docker" / "standins.Dockerfile"),
            "--target",
            target,
            "--build-arg",
            f"DEBIAN_IMAGE={DEBIAN_IMAGE}",
            "--build-arg",
            f"FLWR_VERSION={images[target].split(':')[1]}",
            "-t",
            images[target],
            str(context),
            timeout=1800,
        )


def host_network_compose(engine: DockerEngine, compose: list[str], override: dict) -> Path:
    """The compose file with ``override`` applied, written beside it. docker-compose 1.29
    refuses published ports with host networking and an override cannot drop them (Compose
    v2's ``ports: !reset []`` can): the merged ``config`` of the two, without ``ports``."""
    folder = Path(compose[compose.index("-f") + 1]).parent
    (folder / "host-network.yml").write_text(yaml.safe_dump(override))
    merged = engine.run([*compose, "-f", str(folder / "host-network.yml"), "config"]).stdout
    merged = yaml.safe_load(merged)
    for service in merged["services"].values():
        service.pop("ports", None)
    (folder / "compose.host-network.yml").write_text(yaml.safe_dump(merged))
    return folder / "compose.host-network.yml"


class Timings:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []
        self.start = time.monotonic()

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.rows.append((name, time.monotonic() - t0))

    def table(self) -> str:
        lines = [f"{name:<42} {seconds:8.1f} s" for name, seconds in self.rows]
        lines.append(f"{'total':<42} {time.monotonic() - self.start:8.1f} s")
        return "\n".join(lines)


@pytest.fixture
def engine(tmp_path):
    """The private Docker engine, one test at a time per cache folder (a file lock)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        run_dir = Path(tempfile.mkdtemp(prefix="fbdock-", dir="/tmp"))  # short socket paths
        try:
            docker = DockerEngine(CACHE / "data-root", run_dir)
            try:
                yield docker
            finally:
                docker.stop()
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)


def test_compose_demo_runs_two_rounds_over_tls_on_docker(engine, tmp_path):
    timings = Timings()
    demo = tmp_path / "demo"
    copy_build_files(demo)
    compose = ["docker-compose", "-p", PROJECT, "-f", str(demo / "docker" / "compose.yml")]
    services = compose_services()
    ports = {
        int(option(command_line(s), "--port")): free_port()
        for s in services.values()
        if "--port" in s.get("command", [])
    }
    federation = Federation(tmp_path)
    try:
        with timings.phase(f"base image {DEBIAN_IMAGE}"):
            if not engine.has_image(DEBIAN_IMAGE):
                make_debian_image(engine)
        resolved = yaml.safe_load(engine.run([*compose, "config"]).stdout)
        images = standin_images(resolved)
        with timings.phase("stand-ins " + ", ".join(images.values())):
            build_standins(engine, demo, images)
        with torch_pip_args(tmp_path) as torch_args:
            build_args = {"TORCH_PIP_ARGS": torch_args} if torch_args else {}
            override = host_network_override(services, ports, build_args)
            compose = [*compose[:3], "-f", str(host_network_compose(engine, compose, override))]
            with timings.phase("docker-compose build (docker/Dockerfile)"):
                engine.run([*compose, "build", "init"], timeout=3600)
        with timings.phase("docker-compose up -d, 3 SuperNodes online"):
            engine.run([*compose, "up", "-d"], timeout=600)
            connection = federation.connect(
                "docker", f"127.0.0.1:{ports[8000]}", demo / "docker" / "certificates" / "ca.crt"
            )
            federation.wait_for_nodes(connection, 3, timeout=300)
        with timings.phase("flwr run . docker (2 rounds, TLS)"):
            run = FlwrRun(federation, connection, {"num-server-rounds": 2})
            assert run.finish(timeout=1200) == 0, run.log[-4000:]
        print("".join(line for line in run.lines if "flowerbed round" in line))
        found = re.findall(r"flowerbed: results go to (\S+)", run.log)
        assert found, run.log[-4000:]
        container = engine.run([*compose, "ps", "-q", "superexec-serverapp"]).stdout.strip()
        engine.docker("cp", f"{container}:{found[-1]}", str(tmp_path / "results"))
        logs = engine.run(
            [*compose, "logs", "--no-color", "superlink", "supernode-1", "register"]
        ).stdout
    except BaseException:
        print(engine.run([*compose, "logs", "--no-color", "--tail", "60"], check=False).stdout)
        raise
    finally:
        with timings.phase("docker-compose down -v"):
            engine.run([*compose, "down", "-v", "--remove-orphans"], check=False, timeout=300)
            engine.docker("image", "prune", "-f", check=False)  # superseded builds
        for folder in DEMO_SECRETS:
            shutil.rmtree(demo / "docker" / folder, ignore_errors=True)
        print("\n" + timings.table())

    history = json.loads((tmp_path / "results" / "history.json").read_text())
    assert [row["round"] for row in history] == [0, 1, 2]
    assert all(math.isfinite(row["central_accuracy"]) for row in history), history
    for row in history[1:]:
        assert row["clients_trained"] == 3 and row["clients_failed"] == 0, row
    assert history[-1]["central_accuracy"] > history[0]["central_accuracy"], history
    config = json.loads((tmp_path / "results" / "config.json").read_text())
    assert config["num-partitions"] == 3 and config["num-server-rounds"] == 2
    # TLS on the SuperLink's APIs and on a SuperNode's Runtime API, on loopback only
    assert f"Uvicorn running on https://127.0.0.1:{ports[8000]}" in logs, logs[-3000:]
    assert f"running on https://127.0.0.1:{ports[9094]}" in logs, logs[-3000:]
    # SuperNode authentication: the three keys init made, registered before the SuperNodes
    for node in ("supernode-1", "supernode-2", "supernode-3"):
        assert f"/app/keys/{node}.pub: registered" in logs, logs[-3000:]
