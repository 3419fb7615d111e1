"""Graph IR: ``Graph`` / ``Value`` / ``Node``, the op registry (``ops.OPS``) and composites."""

from .graph import DTYPES, Graph, GraphError, Node, Value
from . import ops
from .ops import OPS, OpDef
from .reference import evaluate

__all__ = ["DTYPES", "Graph", "GraphError", "Node", "Value", "ops", "OPS", "OpDef", "evaluate"]
