"""Probe: torch's warnings, C++ (a resized `out=`) and Python `stacklevel` (F.softmax without dim),
under the user's filters and registries, also after warnings.resetwarnings(). Prints what it saw."""

import warnings

import torch
import torch.nn.functional as F

x = torch.randn(2, 3)


def resized_out():
    torch.add(x, x, out=torch.empty(1))


with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    F.softmax(x)
    resized_out()
print([(w.filename.rsplit("/", 1)[-1], w.lineno) for w in seen])
warnings.resetwarnings()  # the tool's own filter goes too: each warning is shown once per line
for _ in range(2):
    F.softmax(x)
    resized_out()
F.softmax(x)
resized_out()
warnings.simplefilter("once")
F.softmax(x)
resized_out()
warnings.filterwarnings("ignore", module="__main__")
F.softmax(x)
registries = (__warningregistry__, warnings.onceregistry)  # "version" is the filters' edit count
print([sorted(str(k[-1]) for k in r if k != "version") for r in registries])
