"""docker-compose.yml and the Dockerfile: validated by `docker compose config` where the compose
plugin is installed, and always by a structural check (services, dependencies, GPU reservation,
commands that exist, environment variables the settings know).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from gradguard.service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV = {"POSTGRES_PASSWORD": "pw-for-validation", "GRADGUARD_ADMIN_TOKEN": "a-token-for-validation-only"}


def _compose_command() -> list[str] | None:
    """``docker compose`` (the plugin) or the standalone ``docker-compose``, whichever is installed."""
    if shutil.which("docker") is not None:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def test_docker_compose_config_accepts_the_file() -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed; test_compose_structure still "
                    "validates the file")
    result = subprocess.run([*command, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True,
                            env={**os.environ, **ENV}, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_compose_structure() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker-cpu", "worker-gpu"}
    for name, service in services.items():
        assert "image" in service or "build" in service, name
    for name in ("api", "worker-cpu", "worker-gpu"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"], name
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert services["worker-gpu"]["build"]["args"]["JAX_EXTRA"]
    assert "deploy" not in services["worker-cpu"]

    commands = {ep.name for ep in entry_points(group="gradguard.commands")} | {"check"}
    queues = {}
    for name in ("migrate", "api", "worker-cpu", "worker-gpu"):
        command = services[name]["command"]
        assert command[0] in commands, f"{name} runs unknown command {command[0]!r}"
        if command[0] == "worker":
            queues[name] = command[command.index("--queue") + 1]
    assert queues == {"worker-cpu": "cpu", "worker-gpu": "gpu"}

    fields = set(Settings.model_fields)
    for name in ("migrate", "api", "worker-cpu", "worker-gpu"):
        env = services[name]["environment"]
        unknown = [k for k in env if k.startswith("GRADGUARD_") and k[len("GRADGUARD_"):].lower() not in fields]
        assert not unknown, f"{name} sets variables the settings ignore: {unknown}"
        assert env["GRADGUARD_EXECUTOR"] == "celery" and env["GRADGUARD_MODE"] == "production"
        assert "${GRADGUARD_ADMIN_TOKEN:?" in env["GRADGUARD_ADMIN_TOKEN"], "no default admin token in the file"


def test_dockerfile_copies_what_exists_and_runs_gradguard() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (\S+)", text, flags=re.M):
        assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"
    assert 'ENTRYPOINT ["gradguard"]' in text and "bubblewrap" in text and re.search(r"^USER ", text, flags=re.M)


def test_workers_run_the_sandbox_for_real() -> None:
    """What a worker container needs for bubblewrap, and a floor that turns a failure into a refusal."""
    import json

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in ("worker-cpu", "worker-gpu"):
        worker = services[name]
        env = worker["environment"]
        assert env["GRADGUARD_SANDBOX_MIN_LEVEL"] == "bubblewrap", name  # below it: no run, /readyz 503
        assert "GRADGUARD_SANDBOX_INSECURE" not in env, name
        options = dict(opt.split("=", 1) for opt in worker["security_opt"])
        assert options["apparmor"] == "unconfined", name  # docker-default's AppArmor profile denies mount
        profile_path = ROOT / options["seccomp"]
        assert options["seccomp"] != "unconfined" and profile_path.is_file(), name
        profile = json.loads(profile_path.read_text())
        assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
        denied = {call for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" for call in rule["names"]}
        assert not denied & {"unshare", "clone", "clone3", "mount", "umount2", "pivot_root", "prctl", "setns"}
        assert {"kexec_load", "init_module", "bpf", "keyctl", "ptrace", "open_by_handle_at"} <= denied
    assert "apt-get install -y --no-install-recommends bubblewrap libseccomp2" in (ROOT / "Dockerfile").read_text()
