"""A deterministic stream/event model with a race detector (model), and the schedules that drive it (schedule)."""

from contracts.streams.model import Mem, StreamDeadlock, StreamModel, StreamViolation, UnsupportedStreamOp
from contracts.streams.schedule import EAGER, Schedule, Stall

__all__ = ["EAGER", "Mem", "Schedule", "Stall", "StreamDeadlock", "StreamModel", "StreamViolation",
           "UnsupportedStreamOp"]
