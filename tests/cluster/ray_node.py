"""``ray start`` for a node of the local cluster, kept on loopback: ``python ray_node.py start --address=... ...``.

Ray binds its servers to loopback only with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (every process of the
cluster has it), but its ``ray start`` then refuses to start a second node ("Multi-node Ray clusters are not
supported on Windows and OSX"), a check meant for those platforms. With the variable unset, Ray advertises and
binds the machine's outward address instead. So this runs Ray's own command line with that one check seeing the
multi-node setting, while everything else (the node's address, what its raylet, agents and workers bind) keeps
loopback. A real cluster needs none of this: its nodes are machines with their own addresses.
"""

import sys
import types

from ray._private import ray_constants
from ray.scripts import scripts


class _ForStart(types.ModuleType):
    """Ray's constants module as ``ray start`` sees it, but for ``ENABLE_RAY_CLUSTER``."""

    def __getattr__(self, name):
        return getattr(ray_constants, name)


if __name__ == "__main__":
    constants = _ForStart("ray_constants_for_start")
    constants.ENABLE_RAY_CLUSTER = True
    scripts.ray_constants = constants
    sys.argv[0] = "ray"
    scripts.main()
