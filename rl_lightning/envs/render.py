"""Headless rasterisers: observations -> uint8 RGB pixels with torch alone."""

from __future__ import annotations

import torch
from torch import Tensor

WHITE = (255, 255, 255)
CART_COLOR = (40, 40, 40)
POLE_COLOR = (202, 152, 101)
AXLE_COLOR = (129, 132, 203)
TRACK_COLOR = (0, 0, 0)


# Label -> colour, for the label maps the rasteriser paints.
_PALETTE = torch.tensor([WHITE, CART_COLOR, POLE_COLOR, AXLE_COLOR, TRACK_COLOR], dtype=torch.uint8)
_BACKGROUND, _CART, _POLE, _AXLE, _TRACK = range(5)
# Images rasterised at once: bounds the int64 index tensor of the palette lookup.
_CHUNK = 512


def draw_cartpole(obs: Tensor, height: int = 80, width: int = 120) -> Tensor:
    """Draw CartPole observations like gymnasium's renderer (scaled down).

    Every shape is found with broadcasting of per-row and per-column quantities, so a frame
    costs a handful of byte-sized passes (~0.1 ms for 100x150), not float geometry per pixel.

    Args:
        obs: ``(*batch, 4)`` observations (x, x_dot, theta, theta_dot).
        height, width: image size in pixels.

    Returns:
        uint8 ``(*batch, height, width, 3)`` on the CPU.
    """
    obs = obs.detach().to("cpu", torch.float32)
    batch_shape = obs.shape[:-1]
    flat = obs.reshape(-1, 4)
    images = torch.empty(flat.shape[0], height, width, 3, dtype=torch.uint8)
    for start in range(0, flat.shape[0], _CHUNK):
        chunk = flat[start : start + _CHUNK]
        images[start : start + _CHUNK] = _PALETTE[_cartpole_labels(chunk, height, width).long()]
    return images.reshape(*batch_shape, height, width, 3)


def _cartpole_labels(obs: Tensor, height: int, width: int) -> Tensor:
    """uint8 label maps ``(batch, height, width)`` of CartPole scenes."""
    x = obs[:, 0].view(-1, 1, 1)
    theta = obs[:, 2].view(-1, 1, 1)
    scale = width / (2 * 2.4)
    # Pixel centres, y measured upwards from the bottom row like gymnasium's flipped surface.
    py = (height - 1 - torch.arange(height, dtype=torch.float32)).view(1, -1, 1)
    px = torch.arange(width, dtype=torch.float32).view(1, 1, -1)

    cart_y = 0.2 * height
    cart_w, cart_h = 50.0 * width / 600, 30.0 * height / 400
    cart_x = x * scale + width / 2.0
    labels = torch.zeros(obs.shape[0], height, width, dtype=torch.uint8)
    labels[:, (py.view(-1) - cart_y).abs() < 0.6, :] = _TRACK
    cart = ((py >= cart_y) & (py <= cart_y + cart_h)) & ((px - cart_x).abs() <= cart_w / 2)
    labels.masked_fill_(cart, _CART)

    # The pole leans by theta (clockwise positive) from the axle: on row y its centre is at
    # axle_x + (y - axle_y) tan(theta), and it is pole_half_w / cos(theta) wide horizontally.
    pole_len = scale * 2 * 0.5
    pole_half_w = max(1.0, 10.0 * width / 600 / 2)
    axle_x, axle_y = cart_x, cart_y + cart_h * 0.75
    cos_theta = torch.cos(theta).clamp(min=0.05)
    along = (py - axle_y) / cos_theta  # distance along the pole of row y's crossing
    centre = axle_x + (py - axle_y) * torch.tan(theta)
    pole = (along >= 0) & (along <= pole_len) & ((px - centre).abs() <= pole_half_w / cos_theta)
    labels.masked_fill_(pole, _POLE)
    axle = (px - axle_x).square() + (py - axle_y).square() <= pole_half_w**2
    labels.masked_fill_(axle, _AXLE)
    return labels


def draw_probe(obs: Tensor, height: int = 32, width: int = 32) -> Tensor:
    """Draw a probe env's scalar observation as a grey level (obs -1 black .. +1 white).

    Args:
        obs: ``(*batch, 1)`` observations.

    Returns:
        uint8 ``(*batch, height, width, 3)`` on the CPU.
    """
    obs = obs.detach().to("cpu", torch.float32)
    level = ((obs[..., 0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return level[..., None, None, None].expand(*level.shape, height, width, 3).clone()
