"""Make the golden outputs of tests/test_parity.py again, from this working tree.

Run: python -m tests.golden_make — only when figures change on purpose; the commit says why.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.test_parity import ENGINE, GOLDEN, STUDIES, study_report


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in STUDIES:
            # a folder each: a study folder holds one study
            report = study_report(name, Path(tmp) / name)
            (GOLDEN / name).write_text(json.dumps(report, indent=1))
            print(f"wrote {GOLDEN / name}")
    for name, make in ENGINE.items():
        (GOLDEN / name).write_text(json.dumps(make()))
        print(f"wrote {GOLDEN / name}")


if __name__ == "__main__":
    main()
