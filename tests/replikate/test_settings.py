"""Configuration: the TOML file, environment overrides, secrets only from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoscii_replikate.settings import DEFAULT_CONFIG, DEFAULTS, JobConfig, Settings
from zosciimq.settings import SettingsError

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "replikate.example.toml"


def load(tmp_path: Path, text: str, **env: str) -> Settings:
    config = tmp_path / "replikate.toml"
    config.write_text(text)
    return Settings.from_env({"ZOSCII_REPLIKATE_CONFIG": str(config), **env})


def test_jobs_inherit_defaults_and_override_them(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        """
        [defaults]
        interval_seconds = 10
        max_messages_per_run = 50
        [jobs.dr]
        source_url = "https://hq.example.com/index.php"
        source_queue = "orders"
        target_queue = "orders"
        [jobs.b2b]
        source_url = "http://partner:8080/"
        source_queue = "invoices"
        cron = "*/5 * * * *"
        max_messages_per_run = 7
        mode = "compat"
        verify_tls = false
        """,
    )
    dr, b2b = settings.job("dr"), settings.job("b2b")
    assert (dr.interval_seconds, dr.max_messages_per_run, dr.cron) == (10.0, 50, None)
    assert dr.verify is True and dr.mode == "default"
    assert (b2b.target_queue, b2b.cron, b2b.max_messages_per_run) == (None, "*/5 * * * *", 7)
    assert b2b.mode == "original" and b2b.verify is False
    assert settings.metrics_port == 9101


def test_secrets_come_from_named_environment_variables(tmp_path: Path) -> None:
    text = """
        [jobs.a]
        source_url = "https://x/"
        source_queue = "q"
        bearer_token_env = "PARTNER_TOKEN"
        basic_auth_user = "abc"
        basic_auth_password_env = "PARTNER_PASSWORD"
        headers = { "X-Partner" = "abc" }
        header_env = { "X-Api-Key" = "PARTNER_KEY" }
        """
    settings = load(tmp_path, text, PARTNER_TOKEN="t0k", PARTNER_PASSWORD="pw", PARTNER_KEY="k")
    job = settings.job("a")
    assert job.headers == {"X-Partner": "abc", "X-Api-Key": "k", "Authorization": "Bearer t0k"}
    assert job.basic_auth == ("abc", "pw")
    assert "t0k" not in repr(job) and "pw" not in repr(job)
    with pytest.raises(SettingsError, match="PARTNER_TOKEN"):
        load(tmp_path, text, PARTNER_PASSWORD="pw", PARTNER_KEY="k")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('headers = { "Authorization" = "Bearer inline" }', "looks like a secret"),
        ('token = "inline"', "secrets go in env vars"),
        ('source_url = "ftp://x"', "source_url"),
        ('cron = "not a cron"', "cron"),
        ('target_queue = "Orders"', "lower case"),
        ('target_queue = "temp"', "reserved"),
        ("interval_seconds = 0", "more than 0"),
        ('mode = "fast"', "mode"),
        ('ca_bundle = "/nonexistent/ca.pem"', "ca_bundle"),
        ('pointer_file = "../escape.txt"', "pointer_file"),
        ("batch_count = 0", "batch_count"),
        ("batch_count = 1001", "batch_count"),
        ("batch_bytes = 0", "batch_bytes"),
        ("wait_seconds = -1", "wait_seconds"),
        ('wait_seconds = "soon"', "wait_seconds"),
    ],
)
def test_bad_job_settings_fail_at_start(tmp_path: Path, body: str, message: str) -> None:
    text = f'[jobs.a]\nsource_queue = "q"\n{body}\n'
    if "source_url" not in body:
        text += 'source_url = "http://x/"\n'
    with pytest.raises(SettingsError, match=message):
        load(tmp_path, text)


def test_two_jobs_on_one_pointer_file_are_refused(tmp_path: Path) -> None:
    text = """
        [jobs.a]
        source_url = "http://a/"
        source_queue = "orders"
        target_queue = "all"
        [jobs.b]
        source_url = "http://b/"
        source_queue = "orders"
        target_queue = "all"
        """
    with pytest.raises(SettingsError, match="share the pointer file"):
        load(tmp_path, text)
    fixed = text + 'pointer_file = "replikate_state_orders_all_b.txt"\n'
    assert len(load(tmp_path, fixed).jobs) == 2


def test_a_single_job_from_the_environment(tmp_path: Path) -> None:
    env = {
        "ZOSCII_REPLIKATE_CONFIG": "",
        "ZOSCII_REPLIKATE_SOURCE_URL": "http://hq:8080/",
        "ZOSCII_REPLIKATE_SOURCE_QUEUE": "orders",
        "ZOSCII_REPLIKATE_TARGET_QUEUE": "mirror",
        "ZOSCII_REPLIKATE_INTERVAL_SECONDS": "15",
        "ZOSCII_REPLIKATE_SOURCE_TOKEN": "s3cret",
        "ZOSCII_DATA_DIR": str(tmp_path),
    }
    if DEFAULT_CONFIG.exists():
        pytest.skip(f"{DEFAULT_CONFIG} exists on this machine")
    settings = Settings.from_env(env)
    (job,) = settings.jobs
    assert (job.name, job.source_queue, job.target_queue) == ("env", "orders", "mirror")
    assert job.interval_seconds == 15.0
    assert job.headers["Authorization"] == "Bearer s3cret"
    assert settings.data_dir == tmp_path


def test_environment_overrides_the_file_defaults(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        '[defaults]\nread_timeout = 9\n[jobs.a]\nsource_url = "http://x/"\nsource_queue = "q"\n',
        ZOSCII_REPLIKATE_READ_TIMEOUT="3.5",
        ZOSCII_REPLIKATE_VERIFY_TLS="false",
    )
    job = settings.job("a")
    assert (job.read_timeout, job.verify) == (3.5, False)
    with pytest.raises(SettingsError, match="ZOSCII_REPLIKATE_READ_TIMEOUT"):
        load(tmp_path, "", ZOSCII_REPLIKATE_READ_TIMEOUT="soon")


def test_an_explicit_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no such file"):
        Settings.from_env({"ZOSCII_REPLIKATE_CONFIG": str(tmp_path / "missing.toml")})


def test_the_shipped_example_is_valid(tmp_path: Path) -> None:
    env = {"HQ_TOKEN": "t", "PARTNER_B_PASSWORD": "p", "SYDNEY_API_KEY": "k"}
    settings = load(tmp_path, EXAMPLE.read_text(), **env)
    assert len(settings.jobs) >= 3


def test_batch_and_wait_settings(tmp_path: Path) -> None:
    text = """
        [defaults]
        batch_count = 250
        [jobs.a]
        source_url = "http://x/"
        source_queue = "q"
        [jobs.b]
        source_url = "http://y/"
        source_queue = "q"
        target_queue = "t"
        batch_count = 1
        batch_bytes = 65536
        wait_seconds = 25
        """
    settings = load(tmp_path, text, ZOSCII_REPLIKATE_BATCH_BYTES="1_000_000")
    a, b = settings.job("a"), settings.job("b")
    assert (a.batch_count, a.batch_bytes, a.wait_seconds) == (250, 1_000_000, 0.0)
    assert (b.batch_count, b.batch_bytes, b.wait_seconds) == (1, 65536, 25.0)
    plain = load(tmp_path, '[jobs.c]\nsource_url = "http://x/"\nsource_queue = "q"\n').job("c")
    assert (plain.batch_count, plain.batch_bytes, plain.wait_seconds) == (100, 16 << 20, 0.0)


def test_a_job_gets_the_job_config_defaults(tmp_path: Path) -> None:
    job = load(tmp_path, '[jobs.c]\nsource_url = "http://x/"\nsource_queue = "q"\n').job("c")
    assert job == JobConfig(name="c", source_url="http://x/", source_queue="q", target_queue=None)
    assert {key: default for key, (_kind, default) in DEFAULTS.items()} == {
        key: getattr(job, key) for key in DEFAULTS
    }


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_every_defaults_key_has_its_environment_override(tmp_path: Path, key: str) -> None:
    kind, default = DEFAULTS[key]
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    value = {
        bool: "false",
        int: "7",
        float: "120.5" if key == "max_future_seconds" else "2.5",  # it has a minimum
        str: {"mode": "original", "ca_bundle": str(ca)}.get(key, ""),
    }[kind]
    variable = "ZOSCII_REPLIKATE_" + key.upper()
    job = load(
        tmp_path, '[jobs.a]\nsource_url = "http://x/"\nsource_queue = "q"\n', **{variable: value}
    ).job("a")
    expected = {bool: False, int: 7, str: value}[kind] if kind is not float else float(value)
    assert getattr(job, key) == expected != default
    if kind in (int, float, bool):
        with pytest.raises(SettingsError, match=variable):
            load(tmp_path, "", **{variable: "many"})
