"""Ahead-of-time compilation of the engine's steps for TPU slices on any host (`jaxjudge aot`).

A compiled program and a cost model, never a measurement: see :mod:`jaxjudge.aot.compile`.
"""

from jaxjudge.aot.compile import (
    DoesNotFitError,
    LibtpuMissingError,
    StepReport,
    Workload,
    aot_compile,
    tpu_devices,
)
from jaxjudge.aot.presets import PRESETS, judge_config
from jaxjudge.models.machine import CHIPS, Chip, chip_for_topology

__all__ = ["CHIPS", "Chip", "chip_for_topology", "DoesNotFitError", "LibtpuMissingError", "StepReport",
           "Workload", "aot_compile", "tpu_devices", "PRESETS", "judge_config"]
