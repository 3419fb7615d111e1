"""Language models on ANE programs: GPT-2 and Llama (incl. llama2.c Stories) — loaders, tokenizers,
graph builders, a float64 reference and generation.

>>> m = orion.models.load("path/to/gpt2")            # HF folder or llama2.c .bin
>>> print(m.generate("Hello", max_tokens=20).text)
>>> for tok in m.stream("Once upon a time", temperature=0.8, top_p=0.9, seed=0):
...     print(tok.text, end="", flush=True)
"""

from .config import GPT2Config, LlamaConfig, config_from_hf
from .engine import Engine
from .model import Model, load
from .sampling import SamplingParams, sample_next
from .stream import Generation, Token, TokenStream
from .loaders import Checkpoint, load_weights, read_checkpoint

__all__ = ["GPT2Config", "LlamaConfig", "config_from_hf", "Engine", "Generation", "Model", "SamplingParams",
           "Token", "TokenStream", "load", "sample_next", "Checkpoint", "load_weights", "read_checkpoint"]
