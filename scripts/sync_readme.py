"""Copy the generated configuration, metrics and bad-input tables into README.md.

The tables are generated from the code into ``docs/configuration.md`` and ``docs/metrics.md``
(``scripts/gen_config_docs.py``, ``scripts/gen_metrics_docs.py``) and from the bad-input
catalogue into ``docs/bad-inputs.md`` (``tests/badinput/test_bad_input_catalogue.py``); this
script copies their
table rows between the ``BEGIN``/``END`` markers of the README, so the README cannot drift from
the code either. ``--check`` exits 1 when the README is stale (``tests/test_readme.py`` runs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTIONS = {
    "configuration table": ROOT / "docs" / "configuration.md",
    "metrics table": ROOT / "docs" / "metrics.md",
    "bad-input table": ROOT / "docs" / "bad-inputs.md",
}


def table(markdown: str) -> str:
    """The first Markdown table of a document (header, separator and rows)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end])


def synced(readme: str) -> str:
    """The README with every marked section replaced by its current table."""
    for name, source in SECTIONS.items():
        pattern = re.compile(
            rf"(<!-- BEGIN {re.escape(name)}[^\n]*-->\n)(.*?)(<!-- END {re.escape(name)} -->)",
            re.DOTALL,
        )
        if not pattern.search(readme):
            raise SystemExit(f"README.md: no BEGIN/END markers for the {name}")
        body = table(source.read_text()) + "\n"
        readme = pattern.sub(lambda m, b=body: m.group(1) + b + m.group(3), readme)
    return readme


def main(argv: list[str]) -> int:
    current = README.read_text()
    wanted = synced(current)
    if "--check" in argv:
        if current != wanted:
            print("README.md tables are stale: run python scripts/sync_readme.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
