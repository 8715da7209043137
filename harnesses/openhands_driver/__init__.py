"""The OpenHands SDK driver script (``driver.py``), run inside the sandbox by the OpenHands venv."""

from pathlib import Path

__all__ = ["DRIVER_FILE"]

DRIVER_FILE = Path(__file__).with_name("driver.py")
