"""The commands: each a parser and a ``main`` over the library, run as ``kvsweep NAME`` (``cli.kvsweep``)."""
