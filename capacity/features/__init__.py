"""Serving features that move an engine's memory or speed, one module per feature (issue 23): what each
takes on the GPU and in host memory, what it does to the KV pool, and what it buys. Each rule is read from
the engines' source per release and serves the scalar estimate and the grid from one definition."""
