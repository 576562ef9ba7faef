from pathlib import Path

import pytest

from zoscii_statissa.__main__ import apply_args, parse_args
from zoscii_statissa.settings import Settings
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


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ZOSCII_STATISSA_PORT", "http"),
        ("ZOSCII_STATISSA_INTERVAL_SECONDS", "0"),
        ("ZOSCII_SPARK_CONF", "executor.memory=4g"),
        ("ZOSCII_SPARK_CONF", "spark.executor.memory"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})
