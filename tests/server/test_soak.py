"""The soak script itself works: one SIGKILL round per protocol, a few fuzz inputs per
listener and both attacks (a small flood of silent sockets), with nothing lost, duplicated
or reordered, every attacked login in, and exit status 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_per_protocol_loses_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--rounds", "1", "--round-seconds", "1",
         "--fuzz-inputs", "16", "--silent-sockets", "300", "--directory", str(tmp_path),
         "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    summary = json.loads(done.stdout.splitlines()[-1])
    tallies = {tally["name"]: tally for tally in summary["tallies"]}
    assert set(tallies) == {"stream", "amqp", "iggy", "bson", "segment", "admin"}
    for name, tally in tallies.items():
        assert not tally["errors"], (name, tally["errors"])
        assert tally["fuzz_inputs"] == 16, name
        if name != "admin":
            assert tally["rounds"] == 1, name
            assert tally["confirmed"] > 0, name
            assert (tally["lost"], tally["duplicated"], tally["reordered"]) == (0, 0, 0), name
        assert (tally["failed_restarts"], tally["server_crashes"]) == (0, 0), name
    assert summary["peak_rss_kb"] > 0
    attacks = {attack["name"]: attack for attack in summary["attacks"]}
    assert set(attacks) == {"login-storm", "silent-sockets", "hostile-patterns"}
    for name, attack in attacks.items():
        assert not attack["errors"], (name, attack["errors"])
        assert None not in attack["logins"].values(), (name, attack["logins"])
    # Beyond the 256 an address may hold before logging in, the oldest were closed.
    assert attacks["silent-sockets"]["details"]["closed_by_broker"] >= 300 - 256
    assert done.returncode == 0, done.stdout
