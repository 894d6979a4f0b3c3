"""Generated client package for dome.patch_proposal@1.2.0 (profile default)."""
from .client import PatchProposalClient, Transport
from .types import *  # noqa: F401,F403

__all__ = ["PatchProposalClient", "Transport"]
