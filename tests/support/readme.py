"""The README's examples, run by the tests as a reader would paste them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_python_blocks(section: str) -> list[str]:
    """The ```python blocks of a README section (from its ## heading to the next)."""
    text = README.read_text()
    body = text[text.index(f"## {section}"):]
    body = body[:body.find("\n## ", 3)]
    return re.findall(r"```python\n(.*?)```", body, re.DOTALL)
