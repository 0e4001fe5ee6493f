#!/usr/bin/env python3
"""The hand edit a user would make to multi_connector.py (the same change runner-patch makes).

    python3 bench/edit_file.py FILE     # edits FILE in place; fails unless the block occurs once

Used by the rebuild routes (bench/rebuild_umoci.sh, bench/rebuild_buildah.sh) in place of
`sed`: the block spans several lines, which sed handles badly.
"""

import re
import sys

BLOCK = re.compile(
    r"^(?P<i>[ \t]*)assert connector_id in self\._prom_metrics, \(\n"
    r"(?P=i)    f\"\{connector_id\} is not contained in the list of registered connectors \"\n"
    r"(?P=i)    f\"with Prometheus metrics support: \{self\._prom_metrics\.keys\(\)\}\"\n"
    r"(?P=i)\)\n"
    r"(?P=i)self\._prom_metrics\[connector_id\]\.observe\((?P<arg>stats_data(?:\[\"data\"\])?), engine_idx\)\n",
    re.M,
)


def fix(m):
    i, arg = m["i"], m["arg"]
    return (
        f"{i}# runner-patch multiconnector-observe: skip connectors without registered Prometheus metrics\n"
        f"{i}prom_metrics = self._prom_metrics.get(connector_id)\n"
        f"{i}if prom_metrics is not None:\n"
        f"{i}    prom_metrics.observe({arg}, engine_idx)\n"
    )


def main(path):
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    new, n = BLOCK.subn(fix, text)
    if n != 1:
        sys.exit(f"edit_file.py: {path}: expected the assert block once, found it {n} times")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
