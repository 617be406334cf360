"""The TypeScript server's launcher holds no absolute path: it finds Node and the SDK relative to
itself, and runs the server program of the checkout it is reached through, so every checkout
linking one shared install runs its own program, and the install survives being moved."""

from __future__ import annotations

from pathlib import Path

from tests.support.ts_install import assert_launcher_relocates
from tests.support.ts_server import SERVER


def test_each_checkout_runs_its_own_program_and_the_install_can_move(tmp_path: Path):
    assert_launcher_relocates(SERVER, tmp_path)
