"""The headless rasteriser every env draws with: observations -> label maps -> uint8 RGB pixels,
with torch alone. Each env's scene (its label maps and palette) lives next to the env."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# Images rasterised at once: bounds the float temporaries and the palette lookup's indices.
_CHUNK = 512


def paint(
    obs: Tensor,
    labels: Callable[[Tensor, int, int], Tensor],
    palette: Tensor,
    height: int,
    width: int,
) -> Tensor:
    """Render ``(*batch, obs_size)`` observations chunk by chunk: ``labels(chunk, height, width)``
    gives uint8 label maps ``(chunk, height, width)`` that index ``palette`` ``(num_labels, 3)``.

    Returns:
        uint8 ``(*batch, height, width, 3)`` on the CPU.
    """
    obs = obs.detach().to("cpu", torch.float32)
    batch_shape = obs.shape[:-1]
    flat = obs.reshape(-1, obs.shape[-1])
    images = torch.empty(flat.shape[0], height, width, 3, dtype=torch.uint8)
    for start in range(0, flat.shape[0], _CHUNK):
        images[start : start + _CHUNK] = palette[labels(flat[start : start + _CHUNK], height, width).long()]
    return images.reshape(*batch_shape, height, width, 3)


def pixel_grid(height: int, width: int, world_height: float, world_width: float) -> tuple[Tensor, Tensor]:
    """Pixel centres in gymnasium's screen units: ``x`` ``(1, 1, width)`` from the left edge and
    ``y`` ``(1, height, 1)`` from the bottom edge (gymnasium draws y-up, then flips), for a
    ``world_width`` x ``world_height`` screen drawn at ``width`` x ``height`` pixels."""
    x = (torch.arange(width, dtype=torch.float32) + 0.5) * (world_width / width)
    y = (height - 0.5 - torch.arange(height, dtype=torch.float32)) * (world_height / height)
    return x.view(1, 1, -1), y.view(1, -1, 1)


def rectangle(
    x: Tensor,
    y: Tensor,
    start_x: Tensor | float,
    start_y: Tensor | float,
    direction_x: Tensor | float,
    direction_y: Tensor | float,
    length: float,
    half_width: float,
) -> Tensor:
    """Which points ``(x, y)`` lie in the rectangle that runs ``length`` from ``(start_x, start_y)``
    along the unit vector ``(direction_x, direction_y)``, ``half_width`` either side of its axis.
    All arguments broadcast; so does the bool result."""
    dx, dy = x - start_x, y - start_y
    along = dx * direction_x + dy * direction_y
    across = dy * direction_x - dx * direction_y
    return (along >= 0) & (along <= length) & (across.abs() <= half_width)


def disc(x: Tensor, y: Tensor, centre_x: Tensor | float, centre_y: Tensor | float, radius: float) -> Tensor:
    """Which points ``(x, y)`` lie within ``radius`` of the centre (broadcasting like ``rectangle``)."""
    return (x - centre_x).square() + (y - centre_y).square() <= radius**2
