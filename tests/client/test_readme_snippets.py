"""Every client snippet of the README runs as written, as a script (`python snippet.py`),
in README order against one broker: only the default ports are changed to the broker's.
So a snippet with top-level `await` fails here, and so do two snippets that share a stream
name (the second would find the first's stream or records)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from mainstem import Broker
from mainstem.protocols import all_protocols

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60  # a script's Python start-up alone takes seconds on a loaded machine
# README section (its ## heading's start) -> what its script prints
SECTIONS = {
    "## Segment store protocol": "",
    "## Embedding": "'stream':",
    "## RabbitMQ Stream protocol": "0 b'hello'",
    "## AMQP 0-9-1": "",
    "## BSON event protocol": "0 {'customer': 'ann'",  # position 0: its stream alone
    "## Iggy protocol": "hello",
}


def snippets() -> list[tuple[str, str]]:
    """(section, code) for each ```python block of the sections above, in README order."""
    text = (ROOT / "README.md").read_text()
    found = []
    for match in re.finditer(r"^## .*$", text, re.MULTILINE):
        section = next((s for s in SECTIONS if match.group().startswith(s)), None)
        if section is None:
            continue
        end = text.find("\n## ", match.end())
        body = text[match.end():end if end != -1 else len(text)]
        found += [(section, code) for code in re.findall(r"```python\n(.*?)```", body,
                                                         re.DOTALL)]
    return found


def on_broker(code: str, broker: Broker, data_dir: Path) -> str:
    """The snippet with the default ports (and the embedded data directory) replaced."""
    for spec in all_protocols():
        code = re.sub(rf"\b{spec.default_port}\b", str(broker.ports[spec.name]), code)
    return code.replace("/tmp/mainstem-data", str(data_dir))


async def run_script(path: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(path), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=env, cwd=path.parent)
    try:
        output, _ = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, output.decode()


def test_each_section_has_its_snippets() -> None:
    found = [section for section, _ in snippets()]
    assert set(found) == set(SECTIONS)
    assert found.count("## Iggy protocol") == 2  # iggy-py and apache-iggy


async def test_the_readme_client_snippets_run_as_scripts(broker: Broker,
                                                         tmp_path: Path) -> None:
    for number, (section, code) in enumerate(snippets()):
        script = tmp_path / f"snippet_{number}.py"
        script.write_text(on_broker(code, broker, tmp_path / f"embedded_{number}"))
        status, output = await run_script(script)
        assert status == 0, f"{section} snippet {number}:\n{output}"
        assert SECTIONS[section] in output, f"{section} snippet {number}:\n{output}"
