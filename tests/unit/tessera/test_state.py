"""Where the state finds its pools' checkpoints: a pool's own `model` path, or the resolver the command line hands
in for pools that name none (the demo builder on the embedded default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import PoolSettings, Settings
from tessera.pools import model_paths as _model_paths


def _settings(*pools: PoolSettings) -> Settings:
    return Settings(pools=list(pools))


def test_pools_that_name_a_checkpoint_need_no_resolver():
    settings = _settings(PoolSettings(name="small", model="/models/a"), PoolSettings(name="large", model="/models/b"))
    assert _model_paths(settings, None) == {"small": "/models/a", "large": "/models/b"}


def test_a_pool_without_a_checkpoint_and_no_resolver_is_refused_by_name():
    settings = _settings(PoolSettings(name="small", model="/models/a"), PoolSettings(name="large"))
    with pytest.raises(ValueError, match=r"\['large'\] have no `model` path"):
        _model_paths(settings, None)


def test_the_resolver_is_asked_for_exactly_the_pools_without_a_checkpoint():
    asked: list[list[str]] = []

    def resolve(settings: Settings, names: list[str]) -> dict[str, Path]:
        asked.append(names)
        return {name: Path("/built") / name for name in names}

    settings = _settings(PoolSettings(name="small"), PoolSettings(name="large", model="/models/b"))
    assert _model_paths(settings, resolve) == {"large": "/models/b", "small": "/built/small"}
    assert asked == [["small"]]


def test_the_demo_resolver_refuses_a_pool_it_has_no_checkpoint_for(tmp_path):
    from demo.checkpoints import resolve_demo_pools

    settings = Settings(data_dir=tmp_path, build_demo_models=False)
    with pytest.raises(ValueError, match="no demo checkpoint of that name"):
        resolve_demo_pools(settings, ["small", "medium"])
    assert resolve_demo_pools(settings, ["small"]) == {"small": tmp_path / "models" / "small"}
