"""The deployment definitions agree with docker-compose.yml, the one definition of the
services: every compose variant (``deploy/compose.<variant>.yml``, an override applied on
top of it) gives each service the same environment settings, and the cloud templates
name only variables compose passes to the same service.

The variant tests run ``docker compose config`` (or docker-compose 1.29) as a user would
combine the files; they need the compose binary, not a Docker engine, and are SKIPPED
(saying so) without it. The other tests only read files.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.compose_cli import clean_environment, compose_command
from tests.e2e.compose_spec import COMPOSE_FILE, REPO_ROOT, load_services

pytestmark = [pytest.mark.timeout(300)]

VARIANTS = sorted((REPO_ROOT / "deploy").glob("compose.*.yml"))
SERVICES = ("api", "replikate", "claireup", "statissa")
AWS_TASK = REPO_ROOT / "deploy" / "aws" / "fargate-task-definition.json"
GCP_SERVICE = REPO_ROOT / "deploy" / "gcp" / "cloud-run-service.yaml"


@pytest.fixture(autouse=True)
def _require_engine() -> None:
    """Overrides the e2e conftest's: nothing here needs a Docker engine or the images."""


def compose_files(*variants: Path) -> list[Path]:
    return [COMPOSE_FILE, *variants]


def compose_variables(service: str) -> set[str]:
    """The variables docker-compose.yml lists for a service (read as YAML)."""
    spec = load_services()[service]
    return set(spec.fixed_env) | set(spec.passthrough_env)


def variable_names() -> set[str]:
    return {name for service in SERVICES for name in compose_variables(service)}


def probe_environment(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A shell environment that sets every listed variable to a value naming it, so that
    a variable a variant fails to pass shows up as missing (unset ones may be left out of
    ``config``'s output), and an empty env file instead of the project's .env."""
    env = clean_environment()
    env.update({name: f"probe-{name}" for name in variable_names()})
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    return env, env_file


def compose_config(files: list[Path], env: Mapping[str, str], env_file: Path) -> dict[str, Any]:
    """``config`` of these files combined, from the repository root, parsed."""
    command = [*compose_command(), "--env-file", str(env_file)]
    for path in files:
        command += ["-f", str(path.relative_to(REPO_ROOT))]
    done = subprocess.run(
        [*command, "config"],
        cwd=REPO_ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(command)} config failed:\n{done.stderr}"
    return yaml.safe_load(done.stdout)


def environment(config: Mapping[str, Any], service: str) -> dict[str, str | None]:
    raw = config["services"][service].get("environment") or {}
    if isinstance(raw, list):  # KEY=VALUE items
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    return {k: None if v is None else str(v) for k, v in raw.items()}


def declared_environment(variant: Path) -> dict[str, set[str]]:
    """Variables a variant file sets itself, per service: the only ones it may change."""
    document = yaml.safe_load(variant.read_text(encoding="utf-8")) or {}
    declared = {}
    for name, service in (document.get("services") or {}).items():
        raw = (service or {}).get("environment") or {}
        names = raw if isinstance(raw, list) else list(raw)
        declared[name] = {str(item).split("=", 1)[0] for item in names}
    return declared


def data_mount(config: Mapping[str, Any], service: str) -> tuple[str, str]:
    """(type, source) of what is mounted at /data, from either compose's rendering."""
    for volume in config["services"][service].get("volumes") or []:
        if isinstance(volume, dict):  # compose v2: long syntax
            if volume.get("target") == "/data":
                return volume.get("type", ""), str(volume.get("source", ""))
            continue
        parts = str(volume).split(":")
        if len(parts) >= 2 and parts[1] == "/data":
            kind = "bind" if parts[0].startswith(("/", ".")) else "volume"
            return kind, parts[0]
    raise AssertionError(f"{service}: nothing mounted at /data")


def test_there_are_variants_and_each_is_an_override() -> None:
    assert {p.name for p in VARIANTS} >= {"compose.bind.yml", "compose.replikate.yml"}
    for variant in VARIANTS:
        document = yaml.safe_load(variant.read_text(encoding="utf-8"))
        for name, service in document["services"].items():
            if name not in SERVICES:
                continue  # a service of the variant's own (bind: data-init)
            copied = {"image", "build", "healthcheck", "ports", "read_only"} & set(service or {})
            assert not copied, (
                f"{variant.name} redefines {sorted(copied)} of {name}: a variant is an "
                "override of docker-compose.yml and takes these from it"
            )


@pytest.mark.parametrize(
    "variants",
    [(v,) for v in VARIANTS] + [tuple(VARIANTS)],
    ids=[v.stem.removeprefix("compose.") for v in VARIANTS] + ["all"],
)
def test_every_variant_passes_every_setting_of_the_base(
    variants: tuple[Path, ...], tmp_path: Path
) -> None:
    env, env_file = probe_environment(tmp_path)
    base = compose_config(compose_files(), env, env_file)
    combined = compose_config(compose_files(*variants), env, env_file)
    assert set(base["services"]) == set(SERVICES)
    declared: dict[str, set[str]] = {}
    for variant in variants:
        for service, names in declared_environment(variant).items():
            declared.setdefault(service, set()).update(names)
    for service in SERVICES:
        assert service in combined["services"], f"{service} missing with {variants}"
        want, got = environment(base, service), environment(combined, service)
        assert len(want) > 3 and all(v is not None for v in want.values()), want
        missing = sorted(set(want) - set(got))
        assert not missing, f"{service}: the variant does not pass {missing}"
        changed = {
            k: (want[k], got[k])
            for k in want
            if got[k] != want[k] and k not in declared.get(service, set())
        }
        assert not changed, f"{service}: the variant changes {changed}"
        assert combined["services"][service]["image"] == base["services"][service]["image"]


def test_the_bind_variant_moves_the_data_to_a_host_directory(tmp_path: Path) -> None:
    env, env_file = probe_environment(tmp_path)
    base = compose_config(compose_files(), env, env_file)
    bind = compose_config(compose_files(REPO_ROOT / "deploy" / "compose.bind.yml"), env, env_file)
    for service in SERVICES:
        assert data_mount(base, service) == ("volume", "zoscii_data"), service
        kind, source = data_mount(bind, service)
        assert kind == "bind" and source == str(REPO_ROOT / "zoscii-data"), (service, source)
        assert "data-init" in bind["services"][service].get("depends_on", {}), service


def test_every_image_is_built_from_the_one_dockerfile(tmp_path: Path) -> None:
    env, env_file = probe_environment(tmp_path)
    base = compose_config(compose_files(), env, env_file)
    for service in SERVICES:
        build = base["services"][service]["build"]
        assert build["dockerfile"] == "deploy/Dockerfile", (service, build)
        assert build["args"]["SERVICE"] == service, (service, build)
        assert Path(build["context"]).resolve() == REPO_ROOT, (service, build)


def dockerfile_inputs(service: str) -> list[Path]:
    """Every file deploy/Dockerfile COPYs for a service from its context."""
    roots = [
        REPO_ROOT / "pyproject.toml",
        REPO_ROOT / "README.md",
        REPO_ROOT / "src" / "zosciimq",
        REPO_ROOT / "services" / service / "pyproject.toml",
        REPO_ROOT / "services" / service / "requirements.txt",
        REPO_ROOT / "services" / service / f"zoscii_{service}",
        *(REPO_ROOT / "services" / service).glob("*.conf.py"),
        REPO_ROOT / "build" / "wheels" / service,  # after deploy/wheelhouse.sh
    ]
    files = []
    for root in roots:
        found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        files += [p for p in found if "__pycache__" not in p.parts and ".egg-info" not in str(p)]
    return files


def test_the_compose_build_context_holds_what_the_dockerfile_copies() -> None:
    """docker-compose builds from the repository root filtered by .dockerignore, with
    docker-py's rules (stricter than the Docker CLI's: no re-inclusion through a
    wildcard directory), so every input must be let back in explicitly."""
    from docker.utils.build import exclude_paths

    lines = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    context = exclude_paths(str(REPO_ROOT), patterns, dockerfile="deploy/Dockerfile")
    assert "deploy/Dockerfile" in context
    for service in SERVICES:
        inputs = [str(p.relative_to(REPO_ROOT)) for p in dockerfile_inputs(service)]
        assert f"services/{service}/requirements.txt" in inputs
        missing = [p for p in inputs if p not in context]
        assert not missing, f"{service}: .dockerignore leaves out {missing[:5]}"
    leaked = sorted(
        p
        for p in context
        if p.startswith((".git/", ".venv/", "tests/", "bench/", "docs/", "zoscii-data/"))
        or "__pycache__" in p
        or ".egg-info" in p
        or p in (".env", "docker-compose.yml")
    )
    assert not leaked, f"the context holds {leaked[:5]}"


def test_the_aws_task_sets_only_variables_compose_passes() -> None:
    task = json.loads(AWS_TASK.read_text(encoding="utf-8"))
    containers = {c["name"]: c for c in task["containerDefinitions"]}
    assert set(containers) == set(SERVICES)
    for name, container in containers.items():
        names = {e["name"] for e in container.get("environment", [])}
        names |= {s["name"] for s in container.get("secrets", [])}
        unknown = sorted(names - compose_variables(name))
        assert not unknown, f"{AWS_TASK.name}: {name} sets {unknown}, unknown to compose"


def test_the_cloud_run_service_sets_only_variables_compose_passes() -> None:
    document = yaml.safe_load(GCP_SERVICE.read_text(encoding="utf-8"))
    containers = {c["name"]: c for c in document["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == set(SERVICES)
    for name, container in containers.items():
        names = {e["name"] for e in container.get("env", [])}
        unknown = sorted(names - compose_variables(name))
        assert not unknown, f"{GCP_SERVICE.name}: {name} sets {unknown}, unknown to compose"
