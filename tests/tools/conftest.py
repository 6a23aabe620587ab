"""Puts tests/support (the shared process helpers) on sys.path for the tool tests."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
