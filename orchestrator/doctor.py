"""``python -m orchestrator.doctor``: the cluster check by the name scripts and recipes run it by; the command is
``kvsweep doctor`` (``orchestrator.cli.doctor``)."""

if __name__ == "__main__":
    from orchestrator.cli.doctor import main

    raise SystemExit(main())
