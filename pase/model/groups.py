"""Groups of devices on a mesh: where each parallelism's group lies, innermost first."""

from __future__ import annotations

import math
from typing import Sequence

from pase.errors import ConfigurationError
from pase.hardware.mesh import DeviceMesh

__all__ = ["group_extents"]


def group_extents(mesh: DeviceMesh, sizes: Sequence[int], names: Sequence[str]) -> list[tuple[int, ...]]:
    """Place groups of ``sizes`` (innermost first) on ``mesh``; per group, its extent on every mesh axis.

    A group fills the innermost axis left before moving out: its size must
    divide what is left of an axis, or be a multiple of it.

    Raises
    ------
    ConfigurationError
        The sizes do not multiply to the mesh's devices, or a group does not
        tile the mesh (``names`` name it in the message).
    """
    if math.prod(sizes) != mesh.devices:
        raise ConfigurationError(
            f"{' x '.join(f'{n} {s}' for n, s in zip(names, sizes))} = {math.prod(sizes):,} devices, but the cluster "
            f"has {mesh.devices:,}; choose sizes whose product is the device count")
    left = list(mesh.shape)
    axis = len(left) - 1
    out = []
    for size, name in zip(sizes, names):
        extents = [1] * len(left)
        need = size
        while need > 1:
            while axis >= 0 and left[axis] == 1:
                axis -= 1
            if need <= left[axis] and left[axis] % need == 0:
                extents[axis] *= need
                left[axis] //= need
                need = 1
            elif need % left[axis] == 0:
                extents[axis] *= left[axis]
                need //= left[axis]
                left[axis] = 1
            else:
                raise ConfigurationError(
                    f"the {name} size {size} does not fit the device mesh {mesh}: {left[axis]} devices are left on "
                    f"its {mesh.axes[axis].name!r} axis, which {size} must divide or be a multiple of; choose sizes "
                    "that follow the nodes")
        out.append(tuple(extents))
    return out
