"""One module per strategy; ``STRATEGIES`` maps the CLI names to classes."""
from .ddp import DDP
from .ps import ParameterServer
from .zero1 import Zero1
from .zero2 import Zero2
from .zero3 import Zero3

STRATEGIES = {"ps": ParameterServer, "ddp": DDP, "zero1": Zero1, "zero2": Zero2, "zero3": Zero3}

__all__ = ["STRATEGIES", "ParameterServer", "DDP", "Zero1", "Zero2", "Zero3"]
