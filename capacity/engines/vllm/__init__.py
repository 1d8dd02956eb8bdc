"""vLLM, one release at a time: the profile (`profile`), the KV cache grouping into block pools
(`grouping`), the profiling run's overhead (`overhead`), MXFP4 weight layouts (`weights`) and the
release-dependent defaults (`releases`). The rows of `capacity/engine_constants.py` say which rule a
release runs. This package root imports none of them, so a module here imports a sibling directly."""
