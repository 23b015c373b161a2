"""Reading a setting from a DictConfig, a dict or an attribute object alike."""

from __future__ import annotations

from typing import Any


def config_value(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg[key]``; ``default`` when the key is missing or set to null."""
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if value is None else value
