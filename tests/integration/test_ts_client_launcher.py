"""The TypeScript client's launcher holds no absolute path: it finds Node and the SDK relative to
itself, and runs the driver of the checkout it is reached through, so every checkout linking one
shared install runs its own driver, and the install survives being moved."""

from __future__ import annotations

from pathlib import Path

from tests.support.ts_client import CLIENT
from tests.support.ts_install import assert_launcher_relocates


def test_each_checkout_runs_its_own_driver_and_the_install_can_move(tmp_path: Path):
    assert_launcher_relocates(CLIENT, tmp_path)
