"""Takes the documentation's pictures of a report with headless Chromium: its verdict map (the report's top) and one
cell's page, written small as WebP into ``docs/img/``, with the report's verdicts fingerprinted beside them.

    make screenshots                                        # the demo's report, then these pictures
    python docs/gen_screenshots.py REPORT_DIR [--out docs/img]

``docs/img/screenshots.json`` records which report the pictures show: the command behind it, the sha256 of its
``tables/verdicts.csv``, and the sha256 of each file the demo's verdict map is made from (``INPUTS``: the
simulator's records and error bands, the verdict rules, the drawing, the sweep). The suite fails when one of those
changed since the pictures were taken: then ``make screenshots`` takes them again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--hide-scrollbars")
# (picture, page of the report, window): the verdict maps fill the report's top; the cell page is H100's continuum.
PICTURES = (("report-verdicts.webp", "report.html", (1100, 930)),
            ("report-cell.webp", "cells/h100_continuum.html", (1100, 1000)))  # fmt: skip
WEBP_QUALITY = 70  # small enough to keep in the repository, sharp enough to read the maps' labels
DEMO = "make demo RESULTS=/tmp/kvsweep-demo"
ROOT = Path(__file__).resolve().parents[1]
INPUTS = ("tests/sim/sim_fingerprint.json", "orchestrator/sim/sim_error.toml", "analysis/verdicts.py",
          "analysis/plots.py", "sweeps/large_dram.py")  # fmt: skip


def input_hashes() -> dict[str, str]:
    """The sha256 of each file the demo's verdict map depends on."""
    return {name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest() for name in INPUTS}


def screenshot(chromium: str, page: Path, size: tuple[int, int], out: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        png = Path(scratch) / "shot.png"
        subprocess.run([chromium, *CHROMIUM_FLAGS, f"--window-size={size[0]},{size[1]}", f"--screenshot={png}",
                        page.as_uri()], capture_output=True, timeout=120, check=True)  # fmt: skip
        Image.open(png).convert("RGB").save(out, "WEBP", quality=WEBP_QUALITY, method=6)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("report", type=Path, help="a report's folder (DIR/<sweep>/report)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "img")
    args = p.parse_args(argv)
    chromium = next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)
    if chromium is None:
        print(f"error: no headless Chromium ({', '.join(CHROMIUM_NAMES)}); `make test-tools` installs one", file=sys.stderr)
        return 2
    missing = [page for _, page, _ in PICTURES if not (args.report / page).is_file()]
    if missing:
        print(f"error: {args.report} has no {', '.join(missing)}; valid: the report of `{DEMO}`", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, page, size in PICTURES:
        screenshot(chromium, args.report / page, size, args.out / name)
        print(f"{args.out / name}: {(args.out / name).stat().st_size / 1024:.0f} KiB")
    verdicts = hashlib.sha256((args.report / "tables" / "verdicts.csv").read_bytes()).hexdigest()
    record = {"command": DEMO, "verdicts_sha256": verdicts, "pictures": [name for name, _, _ in PICTURES],
              "inputs": input_hashes()}
    (args.out / "screenshots.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
