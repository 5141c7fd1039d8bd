import torch
from torch import nn


def build():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32)).half()
    model.head = nn.Linear(32, 4)  # after .half(): float32
    return model
