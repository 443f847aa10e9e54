"""Adapters that plug ferry into training and inference frameworks
(docs/adapters.md). Each submodule imports its framework: import only the
one you use (``import ferry`` imports none of them).

- ``ferry.adapters.vllm``: a vLLM weight transfer backend named "ferry"
  (engine side and trainer side).
- ``ferry.adapters.verl``: a verl checkpoint engine named "ferry".
- ``ferry.adapters.awex``: an Awex weights-exchange backend,
  ``comm_backend="ferry"`` after ``install()``.
- ``ferry.adapters.sglang``: an SGLang custom weight loader,
  ``load_format="ferry.adapters.sglang.load"``.
"""
