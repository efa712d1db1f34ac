"""``python -m orchestrator.doctor``: the cluster check's older form, kept for the scripts that run it by this name;
the command is ``kvsweep doctor`` (``orchestrator.cli.doctor``)."""

if __name__ == "__main__":
    from orchestrator.cli.doctor import main

    raise SystemExit(main())
