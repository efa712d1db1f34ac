"""KV sizing: how much KV a model needs per token, how much a GPU holds, and which regime a run is in."""
