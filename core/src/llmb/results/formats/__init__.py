"""llmb's own log readers, one module per log format, contributed through ``llmb_log_parsers``.

    megatron.py     Megatron's iteration lines (Megatron-LM, Megatron-Bridge, Primus's pairs) and
                    Megatron-Bridge's Step Time lines
    nemo2.py        NeMo 2 (Lightning) iteration lines
    torchtitan.py   torchtitan's metrics lines
    statements.py   what a log states of the run it is: GBS, sequence, GPUs, precision, layout
    checkpoints.py  checkpoint save and load timings (Megatron and NeMo)
    nccl.py         NCCL's collective trace and transport set-up lines
    failures.py     why a run stopped, and Megatron's "[after training is done]"

Each takes its lines from the one prefix stage, ``llmb.results.lines`` (NCCL's trace excepted: its
docstring says why). ``BUILTIN_PARSERS`` is their order: the NCCL trace reader first, since it takes
the collective lines out of what the others read.
"""

from __future__ import annotations

from llmb.results.formats.checkpoints import CheckpointReader
from llmb.results.formats.failures import FailureReader, TrainingDoneReader
from llmb.results.formats.megatron import MegatronReader, StepTimeLinesReader
from llmb.results.formats.nccl import NCCL_DATATYPE_BYTES, NcclReader, NcclTransportReader
from llmb.results.formats.nemo2 import NeMo2Reader
from llmb.results.formats.statements import StatementsReader
from llmb.results.formats.torchtitan import TorchTitanReader
from llmb.results.scan import LogParser

__all__ = [
    "BUILTIN_PARSERS",
    "NCCL_DATATYPE_BYTES",
    "CheckpointReader",
    "FailureReader",
    "MegatronReader",
    "NeMo2Reader",
    "NcclReader",
    "NcclTransportReader",
    "StatementsReader",
    "StepTimeLinesReader",
    "TorchTitanReader",
    "TrainingDoneReader",
]

BUILTIN_PARSERS = (  # NCCL first: it takes the collective lines out of what the others read
    LogParser("nccl", "NCCL collective trace (NCCL_DEBUG_SUBSYS=COLL)", NcclReader),
    LogParser(
        "nccl_transport",
        "NCCL transports: channels, network, net plugin (NCCL_DEBUG=INFO)",
        NcclTransportReader,
    ),
    LogParser("megatron_bridge", "Megatron-Bridge iteration and Step Time lines", MegatronReader),
    LogParser(
        "step_time_lines",
        "Megatron-Bridge Step Time lines in a log without iteration lines (a rank-0-only log)",
        StepTimeLinesReader,
    ),
    LogParser("nemo2", "NeMo 2 (Lightning) iteration lines", NeMo2Reader),
    LogParser(
        "torchtitan",
        "torchtitan metrics lines (step, loss, tps, tflops, mfu, memory)",
        TorchTitanReader,
    ),
    LogParser(
        "statements",
        "what the log states of the run: GPU count, batch, sequence, precision, layers, layout",
        StatementsReader,
    ),
    LogParser(
        "checkpoint", "checkpoint save and load timings (Megatron and NeMo)", CheckpointReader
    ),
    LogParser(
        "training_done", "Megatron's [after training is done] line, where it is", TrainingDoneReader
    ),
    LogParser(
        "failures",
        "why a run stopped: CUDA OOM, NaN check, NCCL watchdog timeout, node failure, Slurm time "
        "limit, preemption or cancel, Python exception, torchrun's root cause, and the symptoms that "
        "follow them",
        FailureReader,
    ),
)
