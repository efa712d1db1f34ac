"""``python -m orchestrator.cli``: the ``kvsweep`` command, where its console script is not installed."""

if __name__ == "__main__":
    from orchestrator.cli.kvsweep import main

    raise SystemExit(main())
