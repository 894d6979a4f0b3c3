"""Generated client package for dome.repo_read@1.0.0 (profile default)."""
from .client import RepoReadClient, Transport
from .types import *  # noqa: F401,F403

__all__ = ["RepoReadClient", "Transport"]
