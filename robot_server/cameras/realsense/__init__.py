"""Intel RealSense colour (and optional depth) cameras through pyrealsense2, opened by serial."""

from robot_server.cameras.realsense.camera import RealSenseCamera, RealSenseConfig

__all__ = ["RealSenseCamera", "RealSenseConfig"]
