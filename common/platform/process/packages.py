"""The versions of the packages this process runs with: what ``augment doctor`` reports and what a tracked run records
as its code tags."""

from __future__ import annotations

import importlib.metadata as metadata
from typing import Optional


def package_version(package: str) -> Optional[str]:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
