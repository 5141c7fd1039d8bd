"""check FILE.py:build --diff: a head built after .half(), in a file that never imports torch itself."""

from torch import nn


def build():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32)).half()
    model.head = nn.Linear(32, 4)  # after .half(): float32
    return model
