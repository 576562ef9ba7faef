"""The deployment definitions agree with docker-compose.yml, the one definition of the
services: every compose variant (``deploy/compose.<variant>.yml``, an override applied on
top of it) gives each service the same environment settings, and the cloud templates
name only variables compose passes to the same service. The proxy (nginx in front of the
api) is the only service published on all interfaces; it is hardened like the others,
and in the cloud templates it is the container that takes the requests.

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
SERVICES = ("api", "live", "replikate", "claireup", "statissa")  # the ones with the data volume
PROXY = "proxy"
ALL_SERVICES = (PROXY, *SERVICES)
NGINX_DIR = REPO_ROOT / "deploy" / "nginx"
# Set only in the cloud templates, where every container of a task shares one network
# namespace: the api moves off the proxy's port (compose gives each its own address).
CLOUD_ONLY = {"api": {"ZOSCII_BIND"}, "live": {"ZOSCII_LIVE_HOST", "ZOSCII_LIVE_PORT"}}
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
    return {name for service in ALL_SERVICES for name in compose_variables(service)}


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
            if name not in ALL_SERVICES:
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
    assert set(base["services"]) == set(ALL_SERVICES)
    declared: dict[str, set[str]] = {}
    for variant in variants:
        for service, names in declared_environment(variant).items():
            declared.setdefault(service, set()).update(names)
    for service in ALL_SERVICES:
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
        REPO_ROOT / "build" / "wheels" / "common",  # the stages every image shares
        REPO_ROOT / "build" / "wheels" / "build",
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
    assert set(containers) == set(ALL_SERVICES)
    for name, container in containers.items():
        names = {e["name"] for e in container.get("environment", [])}
        names |= {s["name"] for s in container.get("secrets", [])}
        unknown = sorted(names - compose_variables(name) - CLOUD_ONLY.get(name, set()))
        assert not unknown, f"{AWS_TASK.name}: {name} sets {unknown}, unknown to compose"


def test_the_cloud_run_service_sets_only_variables_compose_passes() -> None:
    document = yaml.safe_load(GCP_SERVICE.read_text(encoding="utf-8"))
    containers = {c["name"]: c for c in document["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == set(ALL_SERVICES)
    for name, container in containers.items():
        names = {e["name"] for e in container.get("env", [])}
        unknown = sorted(names - compose_variables(name) - CLOUD_ONLY.get(name, set()))
        assert not unknown, f"{GCP_SERVICE.name}: {name} sets {unknown}, unknown to compose"


# ---- the proxy and the published ports ------------------------------------------------


def host_bindings(config: Mapping[str, Any], service: str) -> list[tuple[str, int]]:
    """(host address, container port) of every published port, either compose's rendering
    ("" for all interfaces)."""
    found = []
    for port in config["services"][service].get("ports") or []:
        if isinstance(port, dict):  # compose v2: long syntax
            found.append((str(port.get("host_ip") or ""), int(port["target"])))
            continue
        parts = str(port).split(":")
        found.append((parts[0] if len(parts) == 3 else "", int(parts[-1].split("/")[0])))
    return found


@pytest.mark.parametrize(
    "variants",
    [()] + [(v,) for v in VARIANTS] + [tuple(VARIANTS)],
    ids=["base"] + [v.stem.removeprefix("compose.") for v in VARIANTS] + ["all"],
)
def test_only_the_proxy_listens_beyond_this_host(
    variants: tuple[Path, ...], tmp_path: Path
) -> None:
    """The proxy takes the public port (8080, ZOSCII_API_PORT, as before it); every other
    published port is on ZOSCII_INTERNAL_ADDRESS, 127.0.0.1 unless set (issue 15)."""
    env, env_file = probe_environment(tmp_path)
    config = compose_config(compose_files(*variants), env, env_file)
    public = {s: host_bindings(config, s) for s in config["services"]}
    assert public[PROXY] in ([("", 8080)], [("0.0.0.0", 8080)]), public[PROXY]
    for service, bindings in public.items():
        if service == PROXY:
            continue
        wide = [b for b in bindings if b[0] != "127.0.0.1"]
        assert not wide, f"{service} publishes {wide} beyond 127.0.0.1"
    assert (("127.0.0.1", 8080)) in public["api"]  # the direct port, for this host only
    # So the api runs the loop server when nothing says otherwise, behind the proxy (its
    # own default, for an api alone, is threads).
    unset = {k: v for k, v in env.items() if k != "ZOSCII_API_SERVER"}
    by_default = compose_config(compose_files(*variants), unset, env_file)
    assert environment(by_default, "api")["ZOSCII_API_SERVER"] == "loop"
    opened = compose_config(
        compose_files(*variants), {**env, "ZOSCII_INTERNAL_ADDRESS": "0.0.0.0"}, env_file
    )
    for service in SERVICES:
        assert {host for host, _ in host_bindings(opened, service)} == {"0.0.0.0"}, service


def test_the_proxy_is_hardened_like_the_services(tmp_path: Path) -> None:
    env, env_file = probe_environment(tmp_path)
    config = compose_config(compose_files(), env, env_file)
    proxy, api = config["services"][PROXY], config["services"]["api"]
    for name, service in ((PROXY, proxy), ("api", api)):
        assert service.get("read_only") is True, name
        assert service.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert "/tmp" in service.get("tmpfs", []), name
    assert not proxy.get("cap_add"), proxy.get("cap_add")  # port 8080, non-root: none needed
    assert proxy.get("privileged") is not True and not proxy.get("user")  # the image's user
    assert proxy["image"].startswith("zoscii/proxy:"), proxy["image"]
    assert Path(proxy["build"]["context"]).resolve() == NGINX_DIR, proxy["build"]
    assert "BASE_IMAGE" in proxy["build"]["args"]
    assert proxy["healthcheck"]["test"][-1] == "/usr/local/bin/zoscii-proxy-health"
    assert proxy["environment"]["ZOSCII_PROXY_UPSTREAM"] == "api:8080"
    # the api's largest message reaches the proxy too (its body limit follows it)
    assert proxy["environment"]["ZOSCII_MAX_MESSAGE_BYTES"] == "probe-ZOSCII_MAX_MESSAGE_BYTES"
    mounts = [
        str(v.get("target") if isinstance(v, dict) else v.split(":")[1])
        for v in proxy.get("volumes", [])
    ]
    assert mounts == ["/var/spool/zoscii-proxy"], mounts  # no /data


def test_the_proxy_image_copies_only_what_images_sh_sends() -> None:
    """deploy/images.sh builds the proxy from a context of the files it names (as it does
    for the services): each COPY of deploy/nginx/Dockerfile must be one of them."""
    dockerfile = (NGINX_DIR / "Dockerfile").read_text(encoding="utf-8")
    assert "ARG BASE_IMAGE=" in dockerfile and "FROM ${BASE_IMAGE}" in dockerfile
    assert "\nUSER " in dockerfile and "HEALTHCHECK" in dockerfile
    copied = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert copied, "no COPY in deploy/nginx/Dockerfile"
    script = (REPO_ROOT / "deploy" / "images.sh").read_text(encoding="utf-8")
    for source in copied:
        assert (NGINX_DIR / source).is_file(), source
        assert source in script, f"deploy/images.sh does not send {source} to the build"


def test_the_nginx_configuration_buffers_and_keeps_secrets_out_of_its_log() -> None:
    """The properties issue 15 needs, read from the template: whole requests before the
    api, short head/body timeouts, keep-alive to the api, bodies spooled to disk, no query
    string in the access log (queue names, GET messages), /metrics not proxied."""
    conf = (NGINX_DIR / "nginx.conf.template").read_text(encoding="utf-8")
    lines = [line.split("#")[0].strip() for line in conf.splitlines()]
    directives = [line for line in lines if line]

    def has(prefix: str) -> bool:
        return any(line.startswith(prefix) for line in directives)

    for wanted in (
        "proxy_request_buffering on;",
        "proxy_buffering on;",
        "client_header_timeout @HEADER_TIMEOUT@s;",
        "client_body_timeout @BODY_TIMEOUT@s;",
        "client_body_buffer_size ",
        "client_body_temp_path /var/spool/zoscii-proxy/",
        "client_max_body_size @MAX_BODY_BYTES@;",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "proxy_set_header X-Forwarded-For $remote_addr;",
        "proxy_set_header X-Request-ID ",
        "keepalive 32;",
    ):
        assert has(wanted), f"nginx.conf.template lacks {wanted!r}"
    log_format = conf[conf.index("log_format") : conf.index("access_log")]
    for leak in ("$request ", "$request_uri", "$args", "$query_string", "$arg_", "$http_referer"):
        assert leak not in log_format, f"the access log would contain {leak}"
    assert '$request"' not in log_format and "$request'" not in log_format
    metrics = conf[conf.index("location = /metrics") :]
    metrics = metrics[: metrics.index("}")]
    assert "proxy_pass" not in metrics and "return 404" in metrics


def test_the_cloud_templates_put_the_proxy_in_front() -> None:
    task = json.loads(AWS_TASK.read_text(encoding="utf-8"))
    aws = {c["name"]: c for c in task["containerDefinitions"]}
    assert {n for n, c in aws.items() if c.get("essential")} == {PROXY, "api", "live"}
    assert [p["containerPort"] for p in aws[PROXY]["portMappings"]] == [8080]
    assert not aws["api"].get("portMappings")  # reached through the proxy only
    aws_env = {e["name"]: e["value"] for e in aws["api"]["environment"]}
    proxy_env = {e["name"]: e["value"] for e in aws[PROXY]["environment"]}
    assert aws_env["ZOSCII_BIND"].startswith("127.0.0.1:"), aws_env["ZOSCII_BIND"]
    assert proxy_env["ZOSCII_PROXY_UPSTREAM"] == aws_env["ZOSCII_BIND"]
    assert {"containerName": "api", "condition": "HEALTHY"} in aws[PROXY]["dependsOn"]
    # waiting reads and streams: to the live service, on the port it listens on
    live_env = {e["name"]: e["value"] for e in aws["live"]["environment"]}
    assert proxy_env["ZOSCII_PROXY_LIVE_UPSTREAM"] == f"127.0.0.1:{live_env['ZOSCII_LIVE_PORT']}"
    assert {"containerName": "live", "condition": "HEALTHY"} in aws[PROXY]["dependsOn"]
    for container in aws.values():
        assert container["readonlyRootFilesystem"] is True, container["name"]
        assert container["linuxParameters"]["capabilities"]["drop"] == ["ALL"]

    document = yaml.safe_load(GCP_SERVICE.read_text(encoding="utf-8"))
    template = document["spec"]["template"]
    run = {c["name"]: c for c in template["spec"]["containers"]}
    ingress = [n for n, c in run.items() if c.get("ports")]
    assert ingress == [PROXY], ingress  # one container takes the requests: the proxy
    assert run[PROXY]["ports"][0]["containerPort"] == 8080
    # Concurrency above 1 needs at least 1 CPU; below 1 CPU only 0.08..1 in steps of 0.01.
    assert int(template["spec"]["containerConcurrency"]) > 1
    for name, container in run.items():
        cpu = float(container["resources"]["limits"]["cpu"])
        assert (cpu >= 1 and cpu == int(cpu)) or (0.08 <= cpu < 1), (name, cpu)
    assert float(run[PROXY]["resources"]["limits"]["cpu"]) >= 1
    run_api = {e["name"]: e["value"] for e in run["api"]["env"]}
    run_proxy = {e["name"]: e["value"] for e in run[PROXY]["env"]}
    assert run_proxy["ZOSCII_PROXY_UPSTREAM"].endswith(run_api["ZOSCII_BIND"].split(":")[-1])
    assert run_proxy["ZOSCII_MAX_MESSAGE_BYTES"] == run_api["ZOSCII_MAX_MESSAGE_BYTES"]
    run_live = {e["name"]: e["value"] for e in run["live"]["env"]}
    assert run_proxy["ZOSCII_PROXY_LIVE_UPSTREAM"] == f"127.0.0.1:{run_live['ZOSCII_LIVE_PORT']}"
    dependencies = json.loads(
        template["metadata"]["annotations"]["run.googleapis.com/container-dependencies"]
    )
    assert dependencies[PROXY] == ["api", "live"]


def test_prometheus_from_the_host_scrapes_the_api_not_the_proxy() -> None:
    """Issue 29: it said localhost:8080, the proxy, which answers 404 on /metrics."""
    text = (REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8")
    advice = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    compose = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    direct = next(p for p in compose["services"]["api"]["ports"] if p.endswith(":8080"))
    default = direct.split("ZOSCII_API_DIRECT_PORT:-")[1].split("}")[0]
    assert f"127.0.0.1:{default}" in advice
    assert "localhost:8080," not in advice and "use localhost:8080" not in advice
    targets = [
        t
        for job in yaml.safe_load(text)["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    ]
    assert "api:8080" in targets  # on the compose network, the api by name
