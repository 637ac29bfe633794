"""Rollout videos: a grid of envs per frame, MP4/GIF encoding, and GIF image summaries for TensorBoard.

Everything is numpy/torch + imageio (Pillow for GIF, imageio-ffmpeg for MP4): no moviepy, no
OpenCV, no display. ``SummaryWriter.add_video`` needs moviepy, so videos reach TensorBoard as an
animated GIF inside an image summary, which the Images tab plays as an animation.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import imageio.v2 as imageio
import numpy as np
import torch
from PIL import Image
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

#: Colour of the lines between cells.
BORDER_COLOR = (128, 128, 128)
#: Colour of grid cells with no env in them.
BLANK_COLOR = (0, 0, 0)
#: Width in pixels of the ring painted inside a flashing cell (visible even for drawings with
#: no white background, such as the probes' grey squares).
FLASH_RING_WIDTH = 3
# Frames drawn per call of ``draw``: bounds the renderer's float temporaries (CartPole makes a
# handful of float (frames, 100, 150) tensors) whatever the rollout length.
_FRAMES_PER_DRAW = 256


def episode_end_flash(dones: Tensor, flash_frames: int) -> Tensor:
    """Which (env, step) cells flash: ``flash_frames`` steps starting where an episode ended.

    Args:
        dones: bool ``(num_envs, num_steps)``; ``dones[e, t]``: env e's episode ended on step t.
        flash_frames: how many frames each flash lasts (0: none).

    Returns:
        bool ``(num_envs, num_steps)``: True on steps t .. t + flash_frames - 1 after each done.
    """
    dones = torch.as_tensor(dones, device="cpu").bool()
    flash = torch.zeros_like(dones)
    num_steps = dones.shape[1]
    for delay in range(min(flash_frames, num_steps)):
        flash[:, delay:] |= dones[:, : num_steps - delay]
    return flash


def iter_grid_frames(
    obs: Tensor,
    dones: Tensor,
    draw: Callable[[Tensor], Tensor],
    grid: tuple[int, int] = (4, 4),
    flash_frames: int = 3,
    flash_color: tuple[int, int, int] = (255, 105, 180),
    border: int = 2,
) -> Iterator[np.ndarray]:
    """Yield the frames of :func:`grid_frames` one at a time, rendering a chunk of steps at once.

    Memory stays bounded by one chunk whatever the rollout length, so the result can be streamed
    into :func:`encode_mp4` / :func:`encode_gif`. Arguments as in :func:`grid_frames`.

    Yields:
        uint8 ``(height, width, 3)`` frames, ``num_steps`` of them (views of a reused buffer:
        copy one to keep it past the next iteration).
    """
    for chunk, _ in _grid_chunks(obs, dones, draw, grid, flash_frames, flash_color, border):
        yield from chunk


def grid_frames(
    obs: Tensor,
    dones: Tensor,
    draw: Callable[[Tensor], Tensor],
    grid: tuple[int, int] = (4, 4),
    flash_frames: int = 3,
    flash_color: tuple[int, int, int] = (255, 105, 180),
    border: int = 2,
) -> np.ndarray:
    """Render a rollout as one video of a grid of envs, flashing each cell where an episode ends.

    The first ``rows * cols`` envs fill the grid row by row; with fewer envs the remaining cells
    stay blank (``BLANK_COLOR``), so the frame size depends on ``grid`` and the drawing only.
    A flashing cell has its white background and a ring of ``FLASH_RING_WIDTH`` pixels along its
    edge painted ``flash_color``, on frames t .. t + flash_frames - 1 for every ``dones[e, t]``.

    Args:
        obs: ``(num_envs, num_steps, *obs_shape)`` observations of a rollout (env-major).
        dones: bool ``(num_envs, num_steps)``; ``dones[e, t]``: env e's episode ended on step t
            (``obs[e, t + 1]`` is the first obs of its next episode).
        draw: the env's ``draw``: ``(*batch, *obs_shape)`` -> uint8 ``(*batch, h, w, 3)``.
        grid: ``(rows, cols)`` of cells.
        flash_frames: frames a flash lasts (0: no flashes).
        flash_color: RGB of the flash.
        border: pixels of ``BORDER_COLOR`` between neighbouring cells (none around the grid).

    Returns:
        uint8 ``(num_steps, rows * h + (rows - 1) * border, cols * w + (cols - 1) * border, 3)``.
    """
    chunks = _grid_chunks(obs, dones, draw, grid, flash_frames, flash_color, border, whole_video=True)
    for _, buffer in chunks:
        video = buffer  # every chunk was rendered in place into this whole-video buffer
    return video


def _grid_chunks(
    obs: Tensor,
    dones: Tensor,
    draw: Callable[[Tensor], Tensor],
    grid: tuple[int, int],
    flash_frames: int,
    flash_color: tuple[int, int, int],
    border: int,
    whole_video: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(chunk, buffer)``: uint8 ``(chunk_steps, H, W, 3)`` grid frames, a view of ``buffer``.

    ``buffer`` holds one chunk and is reused, or with ``whole_video`` holds all ``num_steps``
    frames, each chunk rendered in place (no copy for :func:`grid_frames`).
    """
    rows, cols = grid
    if rows < 1 or cols < 1:
        raise ValueError(f"grid must be (rows, cols) with both >= 1, got {grid!r}")
    if flash_frames < 0 or border < 0:
        raise ValueError(f"flash_frames and border must be >= 0, got {flash_frames} and {border}")
    if obs.ndim < 2 or obs.shape[1] < 1 or tuple(dones.shape) != tuple(obs.shape[:2]):
        raise ValueError(
            f"obs must be (num_envs, num_steps >= 1, *obs_shape) and dones (num_envs, num_steps), "
            f"got {tuple(obs.shape)} and {tuple(dones.shape)}"
        )
    num_envs, num_steps = min(obs.shape[0], rows * cols), obs.shape[1]
    flash = episode_end_flash(dones[:num_envs], flash_frames).numpy()

    steps_per_chunk = max(1, _FRAMES_PER_DRAW // num_envs)
    ring = None
    for start in range(0, num_steps, steps_per_chunk):
        stop = min(start + steps_per_chunk, num_steps)
        cells = draw(obs[:num_envs, start:stop]).numpy()  # (num_envs, chunk, h, w, 3) uint8
        height, width = cells.shape[-3:-1]
        if ring is None:
            grid_shape = (rows * height + (rows - 1) * border, cols * width + (cols - 1) * border, 3)
            buffer = np.empty((num_steps if whole_video else steps_per_chunk, *grid_shape), dtype=np.uint8)
            ring = np.ones((height, width), dtype=bool)
            ring[FLASH_RING_WIDTH:-FLASH_RING_WIDTH, FLASH_RING_WIDTH:-FLASH_RING_WIDTH] = False
        chunk = buffer[start:stop] if whole_video else buffer[: stop - start]
        _paint_background(chunk, cols, height, width, border, num_envs)
        for env in range(num_envs):
            top, left = (env // cols) * (height + border), (env % cols) * (width + border)
            chunk[:, top : top + height, left : left + width] = cells[env]
            for step in np.flatnonzero(flash[env, start:stop]):
                cell = chunk[step, top : top + height, left : left + width]
                cell[(cell == 255).all(axis=-1) | ring] = flash_color
        yield chunk, buffer


def _paint_background(chunk: np.ndarray, cols: int, height: int, width: int, border: int, num_envs: int) -> None:
    """Paint the border lines and the cells with no env of ``chunk`` (num_frames, H, W, 3)."""
    for line in range(height, chunk.shape[1], height + border):
        chunk[:, line : line + border] = BORDER_COLOR
    for line in range(width, chunk.shape[2], width + border):
        chunk[:, :, line : line + border] = BORDER_COLOR
    rows = (chunk.shape[1] + border) // (height + border)
    for cell in range(num_envs, rows * cols):
        top, left = (cell // cols) * (height + border), (cell % cols) * (width + border)
        chunk[:, top : top + height, left : left + width] = BLANK_COLOR


def _frames_and_size(frames: Iterable[np.ndarray]) -> tuple[Iterator[np.ndarray], int, int]:
    """Peek at the first frame: return an iterator over all frames, and their height and width."""
    frames = iter(frames)
    try:
        first = np.asarray(next(frames))
    except StopIteration:
        raise ValueError("cannot encode a video with no frames") from None
    if first.dtype != np.uint8 or first.ndim != 3 or first.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 (height, width, 3), got {first.dtype} {first.shape}")

    def chained() -> Iterator[np.ndarray]:
        yield first
        yield from frames

    return chained(), first.shape[0], first.shape[1]


class Mp4Encoder:
    """An H.264 MP4 (yuv420p, so any browser or player shows it) written frame by frame, none held in memory::

        with Mp4Encoder(fps) as video:
            video.append(frame)  # uint8 (height, width, 3), every frame of one size
        video.bytes

    Odd heights/widths are padded by one black row/column: yuv420p needs even sizes.
    """

    def __init__(self, fps: float):
        self.fps = fps
        #: The bytes of the .mp4 file (after the ``with`` block), ``ceil2(height) x ceil2(width)`` pixels.
        self.bytes = b""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._writer: Any = None
        self._pad: tuple[tuple[int, int], ...] | None = None

    def __enter__(self) -> Mp4Encoder:
        self._tmp = tempfile.TemporaryDirectory()
        return self

    def append(self, frame: np.ndarray) -> None:
        """Write one uint8 ``(height, width, 3)`` frame."""
        if self._writer is None:
            frame = np.asarray(frame)
            if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
                raise ValueError(f"frames must be uint8 (height, width, 3), got {frame.dtype} {frame.shape}")
            height, width = frame.shape[:2]
            self._pad = ((0, height % 2), (0, width % 2), (0, 0)) if height % 2 or width % 2 else None
            # macro_block_size=1: imageio would otherwise resize to multiples of 16.
            # preset veryfast: ~2x faster than libx264's default for these flat-coloured frames, and
            # the files stay small (a few hundred kB for 500 frames of a 4x4 CartPole grid).
            self._writer = imageio.get_writer(
                os.path.join(self._tmp.name, "video.mp4"),
                format="FFMPEG",
                fps=self.fps,
                codec="libx264",
                pixelformat="yuv420p",
                macro_block_size=1,
                ffmpeg_params=["-preset", "veryfast"],
            )
        self._writer.append_data(frame if self._pad is None else np.pad(frame, self._pad))

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if kind is None:
                if self._writer is None:
                    raise ValueError("cannot encode a video with no frames")
                with open(os.path.join(self._tmp.name, "video.mp4"), "rb") as file:
                    self.bytes = file.read()
        finally:
            self._tmp.cleanup()


def encode_mp4(frames: Iterable[np.ndarray], fps: float) -> bytes:
    """Encode frames as an H.264 MP4 (:class:`Mp4Encoder`).

    Args:
        frames: uint8 ``(num_frames, height, width, 3)``, or any iterable of ``(height, width, 3)``.
        fps: frames per second.

    Returns:
        The bytes of the .mp4 file, ``ceil2(height) x ceil2(width)`` pixels.
    """
    with Mp4Encoder(fps) as video:
        for frame in frames:
            video.append(frame)
    return video.bytes


def encode_gif(frames: Iterable[np.ndarray], fps: float) -> bytes:
    """Encode frames as a looping animated GIF.

    GIF delays are whole centiseconds and browsers slow delays under 2 cs down to 10 cs, so the
    frame time is clamped to at least 20 ms (fps above 50 plays at 50). Pillow merges identical
    consecutive frames into one longer frame, which plays the same.

    Args:
        frames: uint8 ``(num_frames, height, width, 3)``, or any iterable of ``(height, width, 3)``.
        fps: frames per second.

    Returns:
        The bytes of the .gif file.
    """
    frames, _, _ = _frames_and_size(frames)
    images = _palette_images(frames)
    first = next(images)
    output = io.BytesIO()
    duration_ms = max(20, round(1000 / fps))
    first.save(output, format="GIF", save_all=True, append_images=images, duration=duration_ms, loop=0)
    return output.getvalue()


def _palette_images(frames: Iterator[np.ndarray]) -> Iterator[Image.Image]:
    """Frames as palette images with their exact colours while the video has at most 256 of them.

    Rendered envs use a handful of colours, and an exact lookup is lossless and ~20x faster
    than Pillow quantising every frame; frames that would overflow 256 colours fall back to it.
    """
    index_of_color = np.full(1 << 24, -1, dtype=np.int16)  # RGB as 24-bit int -> palette index
    palette: list[int] = []  # the palette's colours as 24-bit ints, in index order
    for frame in frames:
        color = (frame[..., 0].astype(np.int32) << 16) | (frame[..., 1].astype(np.int32) << 8) | frame[..., 2]
        index = index_of_color[color]
        unseen = index < 0
        if unseen.any():
            new_colors = np.unique(color[unseen])
            if len(palette) + len(new_colors) > 256:
                yield Image.fromarray(np.ascontiguousarray(frame)).convert("P", palette=Image.Palette.ADAPTIVE)
                continue
            index_of_color[new_colors] = np.arange(len(palette), len(palette) + len(new_colors))
            palette.extend(new_colors.tolist())
            index = index_of_color[color]
        image = Image.fromarray(index.astype(np.uint8))
        image.putpalette([channel for rgb in palette for channel in (rgb >> 16, (rgb >> 8) & 255, rgb & 255)])
        yield image


def video_summary(tag: str, frames: Iterable[np.ndarray], fps: float, caption: str | None = None) -> Summary:
    """An image summary holding an animated GIF: TensorBoard's Images tab plays it.

    Args:
        tag: the summary's tag (its card in the Images tab), e.g. ``"videos/rollout"``.
        frames: uint8 ``(num_frames, height, width, 3)``, or any iterable of ``(height, width, 3)``.
        fps: frames per second.
        caption: markdown shown as the card's description. TensorBoard keeps the description of
            a tag's *first* summary only, so use it for what stays true (what the colours mean);
            per-step text belongs in ``writer.add_text``.
    """
    frames, height, width = _frames_and_size(frames)
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=encode_gif(frames, fps))
    metadata = SummaryMetadata(summary_description=caption or "")
    return Summary(value=[Summary.Value(tag=tag, image=image, metadata=metadata)])


def write_summary(experiment: SummaryWriter, summary: Summary, step: int) -> None:
    """Append ``summary`` at ``step`` to a SummaryWriter (e.g. ``TensorBoardLogger.experiment``)."""
    experiment._get_file_writer().add_summary(summary, step)
