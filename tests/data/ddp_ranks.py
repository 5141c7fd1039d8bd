"""Run under torchrun --nproc-per-node 2 (gloo, CPU). argv: OUT_DIR. Three scenarios, one launch
(each in OUT_DIR/<scenario>/), the failing one last:

dtype_map: rank 1 loads its model differently (the vision tower in bfloat16); reports are gathered to
           rank 0 with gather_reports, which writes merged.json.
watch_fix: both ranks run a bfloat16 model under distributed_watch(mode="fix"); rank 1 feeds float32
           input (the CogVLM shape); rank 0 writes the merged report.
watch_error: as watch_fix but in observe mode: rank 1 fails; every rank writes its own report and
           rank 1 publishes it before its error goes on (rank 0 merges it if torchrun lets it).
"""

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from dtype_doctor.dtype_map import module_dtype_map
from dtype_doctor.integrations.distributed import distributed_watch, gather_reports, rank_info, tag_report
from dtype_doctor.report import Report


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.vision = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.proj = nn.Linear(8, 4)

    def forward(self, x):
        return self.proj(self.vision(x))


def scenario(name: str, out: Path, rank: int) -> None:
    out.mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = Tiny()
    if name == "dtype_map":
        if rank == 1:
            model.vision.to(torch.bfloat16)
        report = Report(tool="run", sections=[module_dtype_map(model)])
        merged = gather_reports(tag_report(report, rank_info()))
        if rank == 0:
            (out / "merged.json").write_text(merged.to_json())
        return
    model.to(torch.bfloat16)
    x = torch.randn(2, 8, dtype=torch.float32 if rank == 1 else torch.bfloat16)
    mode = "fix" if name == "watch_fix" else "observe"
    if name == "watch_error" and rank == 1:
        # let rank 0 finish first: torchrun stops the other workers when one fails
        while not (out / "dtype-doctor.rank0.json").exists():
            time.sleep(0.05)
    with distributed_watch(model, path=out / "dtype-doctor.json", mode=mode):
        model(x)


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for name in ("dtype_map", "watch_fix", "watch_error"):
        scenario(name, out / name, rank)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
