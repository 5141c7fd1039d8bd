"""Probe for `run -m`: a torch C++ warning inside a module run as __main__ is printed, the program
goes on."""

import torch

torch.add(torch.ones(2), torch.ones(2), out=torch.empty(1))
print("ok", __name__)
