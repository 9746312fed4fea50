"""Where the broker's CPU goes: py-spy's collapsed stacks (`--format raw`, as
`bench.amqp_bench --profile DIR` and `bench.profile_rows` write them) summed per module.

    .venv/bin/python -m bench.profile_table FILE.txt [FILE.txt ...] [--top 15]

For each file, the share of samples whose innermost frame is in each module (self time:
where the interpreter or a C call was when sampled), mainstem's modules by their dotted
name and everything else grouped (`asyncio`, `uvloop`, `stdlib`, `idle`...). Prints one
Markdown table per file. Asserts nothing.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^:()]*)(?::\d+)?\)$")
_IDLE = ("select", "poll", "epoll_wait", "_run_once")


def module_of(frame: str) -> str:
    """The module a frame's code is in: mainstem's by dotted name, others by family."""
    match = _FRAME.match(frame)
    if match is None:
        return "other"
    path = match["path"]
    if "mainstem/" in path:
        dotted = path[path.index("mainstem/"):].removesuffix(".py").replace("/", ".")
        return dotted.removesuffix(".__init__")
    for family in ("asyncio", "uvloop", "concurrent", "threading", "selectors"):
        if f"{family}/" in path or path.startswith(family):
            return family
    return "stdlib/other"


def self_time(stacks: Path) -> Counter[str]:
    """Samples per module of the innermost frame; idle waits counted as `idle`."""
    counts: Counter[str] = Counter()
    for line in stacks.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        name = "idle" if any(leaf.startswith(f"{w} ") for w in _IDLE) else module_of(leaf)
        counts[name] += int(number)
    return counts


def table(stacks: Path, top: int) -> str:
    counts = self_time(stacks)
    busy = sum(n for name, n in counts.items() if name != "idle") or 1
    rows = [f"| {name} | {100 * n / busy:.1f}% |" for name, n in counts.most_common()
            if name != "idle"][:top]
    return "\n".join([f"### {stacks.stem} ({busy} busy samples)", "",
                      "| module (self time) | share of busy samples |", "|---|---|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print("\n\n".join(table(path, args.top) for path in args.files))


if __name__ == "__main__":
    main()
