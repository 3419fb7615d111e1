"""Graph IR: ``Graph`` / ``Value`` / ``Node``, the op builders and their registry (``ops``, one module per op
family, derived from the op schema: ``ops.schema()``) and composites."""

from .graph import DTYPES, Graph, GraphError, Node, Value
from . import ops
from .ops import OPS, OpDef
from .reference import evaluate

__all__ = ["DTYPES", "Graph", "GraphError", "Node", "Value", "ops", "OPS", "OpDef", "evaluate"]
