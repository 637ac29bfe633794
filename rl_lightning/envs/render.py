"""Headless rasterisers: observations -> uint8 RGB pixels with torch alone."""

from __future__ import annotations

import torch
from torch import Tensor

WHITE = (255, 255, 255)
CART_COLOR = (40, 40, 40)
POLE_COLOR = (202, 152, 101)
AXLE_COLOR = (129, 132, 203)
TRACK_COLOR = (0, 0, 0)


def _paint(canvas: Tensor, mask: Tensor, color: tuple[int, int, int]) -> None:
    """Paint ``color`` into ``canvas`` (..., H, W, 3) where ``mask`` (..., H, W) is True."""
    canvas.copy_(torch.where(mask.unsqueeze(-1), torch.tensor(color, dtype=torch.uint8), canvas))


def draw_cartpole(obs: Tensor, height: int = 100, width: int = 150) -> Tensor:
    """Draw CartPole observations like gymnasium's renderer (scaled down).

    Args:
        obs: ``(*batch, 4)`` observations (x, x_dot, theta, theta_dot).
        height, width: image size in pixels.

    Returns:
        uint8 ``(*batch, height, width, 3)`` on the CPU.
    """
    obs = obs.detach().to("cpu", torch.float32)
    batch_shape = obs.shape[:-1]
    flat = obs.reshape(-1, 4)
    x = flat[:, 0].view(-1, 1, 1)
    theta = flat[:, 2].view(-1, 1, 1)
    scale = width / (2 * 2.4)
    rows = torch.arange(height, dtype=torch.float32).view(1, -1, 1)
    cols = torch.arange(width, dtype=torch.float32).view(1, 1, -1)
    # Pixel coordinates (origin bottom-left, y up) like gymnasium's flipped surface.
    py = (height - 1 - rows).expand(flat.shape[0], height, width)
    px = cols.expand(flat.shape[0], height, width)

    cart_y = 0.2 * height
    cart_w, cart_h = 50.0 * width / 600, 30.0 * height / 400
    cart_x = x * scale + width / 2.0
    canvas = torch.full((flat.shape[0], height, width, 3), 255, dtype=torch.uint8)

    _paint(canvas, (py - cart_y).abs() < 0.6, TRACK_COLOR)
    cart = ((px - cart_x).abs() <= cart_w / 2) & (py >= cart_y) & (py <= cart_y + cart_h)
    _paint(canvas, cart, CART_COLOR)

    # The pole: a segment from the axle, leaning by theta (clockwise positive), as a thick line.
    pole_len = scale * 2 * 0.5
    pole_half_w = max(1.0, 10.0 * width / 600 / 2)
    axle_x, axle_y = cart_x, cart_y + cart_h * 0.75
    dir_x, dir_y = torch.sin(theta), torch.cos(theta)
    rel_x, rel_y = px - axle_x, py - axle_y
    along = rel_x * dir_x + rel_y * dir_y
    across = (rel_x * dir_y - rel_y * dir_x).abs()
    pole = (along >= 0) & (along <= pole_len) & (across <= pole_half_w)
    _paint(canvas, pole, POLE_COLOR)
    axle = rel_x.square() + rel_y.square() <= pole_half_w**2
    _paint(canvas, axle, AXLE_COLOR)
    return canvas.reshape(*batch_shape, height, width, 3)


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
