"""Run under torchrun --nproc-per-node 2 (gloo, CPU). argv: OUT_DIR. A failing rank must not make
the healthy rank raise or block in the report gather. Two scenarios, one launch:

caught: rank 1 feeds float32 into a bfloat16 model inside distributed_watch and the user catches
        the error; rank 0 is healthy. Then both meet at a barrier.
absent: rank 1 never enters distributed_watch (it died or skipped the block); rank 0 merges what
        arrived within gather_timeout. Then both meet at a barrier.
"""

import datetime
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from dtype_doctor.integrations.distributed import distributed_watch


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=40))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4)).to(torch.bfloat16)
    x = torch.randn(2, 8, dtype=torch.float32 if rank == 1 else torch.bfloat16)

    (out / "caught").mkdir(exist_ok=True)
    try:
        with distributed_watch(model, path=out / "caught" / "dtype-doctor.json"):
            model(x)
    except RuntimeError as exc:
        print(f"rank {rank} caught: {str(exc).splitlines()[0]}", flush=True)
    dist.barrier()

    (out / "absent").mkdir(exist_ok=True)
    if rank == 0:
        with distributed_watch(model, path=out / "absent" / "dtype-doctor.json", gather_timeout=1.0):
            model(x)
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
