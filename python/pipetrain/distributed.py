"""Ranks from pipetrain's launchers (pipetrain launch, mpirun, srun), and torch.distributed's
default group beside them, so scripts that call torch.distributed keep working."""
import atexit
import os
import socket

import torch.distributed as dist

from ._extension import _C

SUPPORTED = "pipetrain launch, mpirun or srun"
# Variables that say which launcher started this process.
_MPI = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
_OTHERS = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK", "WORLD_SIZE")

_world = None  # (rank, size) once started


def _foreign_launcher():
    """The variable of another launcher (torchrun, deepspeed) that set this process up, if any."""
    if any(key in os.environ for key in _MPI):
        return None
    return next((key for key in _OTHERS if key in os.environ), None)


def _free_address():
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = "127.0.0.1"
    with socket.socket() as probe:
        probe.bind(("", 0))
        return f"{address}:{probe.getsockname()[1]}"


def _finish():
    if dist.is_initialized():
        dist.destroy_process_group()
    _C.finish_rank()


def init_distributed(dist_backend=None, auto_mpi_discovery=True, distributed_port=None,
                     verbose=True, timeout=None, init_method=None, dist_init_required=None,
                     config=None, rank=-1, world_size=-1):
    """DeepSpeed's init_distributed: this process's rank of the job its launcher started, and
    torch.distributed's default group (gloo on the CPU, `dist_backend` if given). Idempotent."""
    global _world
    if _world is not None:
        return
    foreign = _foreign_launcher()
    if foreign:
        raise RuntimeError(
            f"pipetrain: this process was started by another launcher ({foreign} is set): "
            f"start it with {SUPPORTED}")
    _world = _C.start_rank()
    atexit.register(_finish)
    if not dist.is_initialized():
        address = _C.broadcast_text(_free_address() if _world[0] == 0 else "")
        dist.init_process_group(backend=dist_backend or "gloo", init_method=f"tcp://{address}",
                                rank=_world[0], world_size=_world[1])


def world():
    """(rank, size) of the job, starting it if needed."""
    init_distributed()
    return _world
