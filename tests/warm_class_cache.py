"""Write the driver JVM's class-sharing archive before the suite starts (``scripts/run_tests.sh`` runs this beside
ruff and mypy).

The suite starts some forty fresh Spark processes (dbt commands, crash steps, CLI runs). Left alone, the first
session of the run leaves the class cache's mark and the second, an xdist worker's, claims the archive and writes
it only when its JVM exits at the end of the run, so none of those processes maps it. Two short sessions here (the
same settings as the suite's Iceberg sessions: ``partialcow doctor --probe``) leave the mark and write the archive;
this waits until it is written, and the suite's first session promotes it. Nothing is done when the class cache is
not used here. When this key's archive already exists the probes still run (about 20 s beside mypy): they map it and
write nothing.
"""

from __future__ import annotations

import subprocess
import sys
import time

from partialcow.spark.class_cache import class_cache_folder, describe

_PROBE = "import sys; from partialcow.cli import main; sys.exit(main(['doctor', '--probe']))"


def main() -> int:
    if not describe().startswith("on"):
        print(f"class cache {describe()}: not warmed")
        return 0
    folder = class_cache_folder()
    began = time.monotonic()
    for _ in range(2):
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=600)
        if probe.returncode != 0:
            print(f"class cache not warmed: the probe failed\n{probe.stdout[-2000:]}{probe.stderr[-2000:]}")
            return 0  # the suite reports Spark problems itself, with its own messages
    dumps = list(folder.glob("*.dump.log"))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all("Written dynamic archive" in log.read_text(errors="replace")
                                                  for log in dumps):
        time.sleep(0.5)
    # a new archive counts in describe() only once the suite's first session has promoted it
    what = "an archive written, promoted by the first session" if dumps else \
        "no archive written (one exists, or another JVM writes it)"
    print(f"class cache: {what}, in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
