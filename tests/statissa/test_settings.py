from pathlib import Path
from typing import Any

import pytest

from zoscii_statissa.__main__ import apply_args, parse_args
from zoscii_statissa.settings import Settings
from zoscii_statissa.spark import extra_conf
from zosciimq.settings import SettingsError


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.port == 9103
    assert settings.interval_seconds == 300
    assert settings.spark_master == "local[*]" and settings.spark_is_local
    assert settings.spark_driver_memory == "1g"
    assert settings.data_dir == Path("/data")
    assert str(settings.spark_local_dir).startswith("/tmp/")


def test_environment_and_flags() -> None:
    env = {
        "ZOSCII_STATISSA_PORT": "9200",
        "ZOSCII_STATISSA_INTERVAL_SECONDS": "60",
        "ZOSCII_SPARK_MASTER": "spark://master:7077",
        "ZOSCII_SPARK_DRIVER_MEMORY": "2g",
        "ZOSCII_SPARK_CONF": "spark.executor.memory=4g, spark.cores.max=8",
        "ZOSCII_DATA_DIR": "/mnt/zoscii",
    }
    settings = Settings.from_env(env)
    assert (settings.port, settings.interval_seconds) == (9200, 60)
    assert not settings.spark_is_local
    assert settings.spark_conf == (("spark.executor.memory", "4g"), ("spark.cores.max", "8"))
    overridden = apply_args(settings, parse_args(["--data-dir", "/elsewhere", "--port", "1234"]))
    assert overridden.data_dir == Path("/elsewhere") and overridden.port == 1234


CODEC = "spark.shuffle.mapStatus.compression.codec"


def test_map_statuses_use_lz4_unless_spark_conf_says_otherwise() -> None:
    """zstd, Spark's default, loads a native library from the noexec /tmp: on a cluster
    the driver cannot send map outputs. lz4 is the default; ZOSCII_SPARK_CONF still wins."""
    assert extra_conf(Settings.from_env({}))[CODEC] == "lz4"
    mine = Settings.from_env({"ZOSCII_SPARK_CONF": f"{CODEC}=snappy,spark.cores.max=8"})
    assert extra_conf(mine) == {CODEC: "snappy", "spark.cores.max": "8"}
    # compose.spark.yml's pairs, then the user's own appended: the later pair wins
    compose = Settings.from_env(
        {"ZOSCII_SPARK_CONF": f"spark.driver.port=7078,{CODEC}=lz4,{CODEC}=zstd"}
    )
    assert extra_conf(compose) == {"spark.driver.port": "7078", CODEC: "zstd"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ZOSCII_STATISSA_PORT", "http"),
        ("ZOSCII_STATISSA_INTERVAL_SECONDS", "0"),
        ("ZOSCII_STATISSA_THREADS", "1"),
        ("ZOSCII_STATISSA_TIMEOUT_SECONDS", "1"),
        ("ZOSCII_SPARK_CONF", "executor.memory=4g"),
        ("ZOSCII_SPARK_CONF", "spark.executor.memory"),
        ("ZOSCII_STATISSA_API_METRICS_URLS", "api:8080/metrics"),
        ("ZOSCII_STATISSA_API_METRICS_URLS", "http://a/metrics, ftp://b/metrics"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_the_server_settings() -> None:
    settings = Settings.from_env({})
    assert (settings.threads, settings.timeout_seconds, settings.graceful_timeout_seconds) == (
        4,
        60,
        20,
    )
    assert not settings.access.enabled  # as before: everything open
    tuned = Settings.from_env(
        {"ZOSCII_STATISSA_THREADS": "8", "ZOSCII_STATISSA_GRACEFUL_TIMEOUT_SECONDS": "5"}
    )
    assert (tuned.threads, tuned.graceful_timeout_seconds) == (8, 5)


_CLIENT = """
[[clients]]
name = "grafana"
token_sha256 = "{}"
actions = {}
"""


def test_access_control_comes_from_the_api_variables(tmp_path: Path) -> None:
    digest = "ab" * 32
    inline = Settings.from_env({"ZOSCII_AUTH_CLIENTS": _CLIENT.format(digest, '["statistics"]')})
    assert inline.access.enabled
    assert inline.access.clients[0].may("statistics", None)
    path = tmp_path / "clients.toml"
    path.write_text(_CLIENT.format(digest, '["metrics"]'))
    from_file = Settings.from_env({"ZOSCII_AUTH_FILE": str(path)})
    assert not from_file.access.clients[0].may("statistics", None)
    with pytest.raises(SettingsError, match=r"actions: 'statistic' is not one of"):
        Settings.from_env({"ZOSCII_AUTH_CLIENTS": _CLIENT.format(digest, '["statistic"]')})
    with pytest.raises(SettingsError, match="ZOSCII_AUTH_FILE"):
        Settings.from_env({"ZOSCII_AUTH_FILE": str(tmp_path / "missing.toml")})


@pytest.mark.slow  # a JVM: the session conftest starts with build_session
def test_the_session_is_built_with_the_default_codec(spark: Any) -> None:
    assert spark.conf.get(CODEC) == "lz4"


def test_fetch_counts_come_from_the_api_unless_told_otherwise() -> None:
    assert Settings.from_env({}).fetch_count_urls == ()
    relayed = Settings.from_env({"ZOSCII_STATISSA_API_URL": "http://api:8080/"})
    assert relayed.fetch_count_urls == ("http://api:8080/metrics",)
    listed = Settings.from_env(
        {
            "ZOSCII_STATISSA_API_URL": "http://api:8080/",
            "ZOSCII_STATISSA_API_METRICS_URLS": "http://api-1:8080/metrics,http://api-2:8080/metrics",
        }
    )
    assert listed.fetch_count_urls == ("http://api-1:8080/metrics", "http://api-2:8080/metrics")
    off = {
        "ZOSCII_STATISSA_API_URL": "http://api:8080/",
        "ZOSCII_STATISSA_API_METRICS_URLS": "none",
    }
    assert Settings.from_env(off).fetch_count_urls == ()


def test_the_metrics_token_is_not_in_the_settings_repr() -> None:
    settings = Settings.from_env({"ZOSCII_STATISSA_API_METRICS_TOKEN": "s3cret-token-value"})
    assert settings.api_metrics_token == "s3cret-token-value"
    assert "s3cret-token-value" not in repr(settings)
