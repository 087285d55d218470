"""Image encoders for image-started world models (CLIP vision tokens)."""

from .clip_vision import CLIPVisionEncoder, clip_pixel_values, tokens_from_clip_vision_output

__all__ = ["CLIPVisionEncoder", "clip_pixel_values", "tokens_from_clip_vision_output"]
