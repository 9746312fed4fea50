"""A real S3 server for the tier's tests: Ceph's RADOS Gateway (Debian's `radosgw`) on a
private single-node Ceph, started in a directory of its own on free loopback ports and
stopped by its pids. `scripts/_radosgw.sh` installs the packages.

Debian 12's Ceph (16, Pacific) has no RGW backend without a cluster (the SQLite `dbstore`
came in 17), so the gateway stores through one monitor and one OSD on `memstore` (objects
in the OSD's memory). The daemons trust each other without keys (`auth ... = none`,
loopback only); the gateway checks its S3 user's signatures as any S3 does. A start takes
a few seconds: the gateway makes its pools at first start, each a new map the monitor
commits, so the monitor proposes every 10 ms rather than every second.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3

from mainstem.testing_cluster import free_port
from mainstem.testing_wait import wait_while_progressing

COMMANDS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool", "setpriv")
OSD_PORTS = 100  # the OSD takes 4 ports, the first free ones from a free port on
STOP_S = 10.0


class RadosGateway:
    """One monitor, one memstore OSD and a gateway, all under `directory`; `start()` makes
    the cluster and an S3 user, `new_bucket()` an empty bucket for each test."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.access_key_id = f"mainstem-{secrets.token_hex(4)}"
        self.secret_access_key = secrets.token_hex(20)
        self._conf = directory / "ceph.conf"
        self._processes: list[subprocess.Popen[bytes]] = []  # in start order

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def keys(self) -> dict[str, str]:
        return {"access_key_id": self.access_key_id,
                "secret_access_key": self.secret_access_key}

    def start(self) -> None:
        """Make and start the cluster and the S3 user. The loopback ports were free when
        chosen, but another process may take one meanwhile: then once more on new ones."""
        missing = [command for command in COMMANDS if shutil.which(command) is None]
        if missing:
            raise RuntimeError(f"{', '.join(missing)} not installed: run scripts/_radosgw.sh "
                               "as root (Debian's radosgw, ceph-mon and ceph-osd)")
        for attempt in range(2):
            try:
                self._start_once()
                return
            except BaseException as error:
                self.stop()
                if attempt == 1 or not isinstance(error, RuntimeError):
                    raise
            shutil.rmtree(self.directory)
            self.port = free_port()

    def _start_once(self) -> None:
        (self.directory / "log").mkdir(parents=True)
        fsid, mon_port = str(uuid.uuid4()), free_port()
        self._conf.write_text(_config(self.directory, fsid, mon_port, free_port(), self.port))
        self._start_monitor(fsid, mon_port)
        self._start_osd()
        self._start_gateway()
        self._ceph_tool("radosgw-admin", "user", "create", "--uid", "mainstem",
                        "--display-name", "mainstem tests", "--access-key", self.access_key_id,
                        "--secret", self.secret_access_key)

    def _start_monitor(self, fsid: str, port: int) -> None:
        monmap = self.directory / "monmap"
        self._ceph_tool("monmaptool", "--create", "--addv", "a", f"[v2:127.0.0.1:{port}]",
                        "--fsid", fsid, str(monmap))
        self._ceph_tool("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap))
        monitor = self._daemon("ceph-mon", "-i", "a")
        self._wait_for("ceph-mon", monitor, lambda: _listens(port))

    def _start_osd(self) -> None:
        osd_uuid = str(uuid.uuid4())
        self._ceph_tool("ceph", "--connect-timeout", "30", "osd", "new", osd_uuid)
        (self.directory / "osd.0").mkdir()
        self._ceph_tool("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        osd = self._daemon("ceph-osd", "-i", "0")
        # the gateway makes its pools at once: a write sent before the OSD is up waits for
        # the client's next tick (5 s) to be sent again
        log = self.directory / "log" / "osd.0.log"
        self._wait_for("osd.0", osd, lambda: "booting -> active" in log.read_text() or None)

    def _start_gateway(self) -> None:
        gateway = self._daemon("radosgw", "-n", "client.rgw")
        self._wait_for("client.rgw", gateway, self._answers)

    def _wait_for(self, name: str, daemon: subprocess.Popen[bytes],
                  ready: Callable[[], bool | None]) -> None:
        """Until `ready()`, while the daemon runs and makes progress; its log's tail if not."""
        log = self.directory / "log" / f"{name}.log"
        if wait_while_progressing(ready, lambda: daemon.poll() is None, daemon.pid,
                                  log) is None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) \
                if log.exists() else "(no log)"
            raise RuntimeError(f"{name} did not start:\n{tail}")

    def _answers(self) -> bool | None:
        try:
            urllib.request.urlopen(self.endpoint, timeout=1).close()
        except urllib.error.HTTPError:
            return True  # it answered
        except OSError:
            return None
        return True

    def _daemon(self, *command: str) -> subprocess.Popen[bytes]:
        """A daemon in the foreground (`-f`: its pid is ours to stop), logging to its file,
        and ended if the thread that started it dies first (a test process killed, or one
        cut short, would leave it running: `setpriv` sets the parent death signal)."""
        with open(self.directory / "log" / f"{command[0]}.out", "ab") as out:
            process = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", *command, "-f",
                                        "-c", str(self._conf)],
                                       stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        self._processes.append(process)
        return process

    def _ceph_tool(self, *command: str) -> None:
        done = subprocess.run([*command, "-c", str(self._conf)], capture_output=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                               f"{done.stderr.decode(errors='replace')[-2000:]}")

    def new_bucket(self) -> str:
        """An empty bucket of a name no test used before."""
        name = f"mainstem-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id=self.access_key_id,
                     aws_secret_access_key=self.secret_access_key).create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the gateway, the OSD and the monitor, in that order, each by its pid."""
        while self._processes:
            process = self._processes.pop()
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(STOP_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(STOP_S)


def _listens(port: int) -> bool | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return None


def _config(directory: Path, fsid: str, mon_port: int, osd_port: int, gateway_port: int
            ) -> str:
    """ceph.conf for a throwaway single-node cluster on loopback: one replica per object,
    one placement group per pool, no keys between daemons, everything under `directory`."""
    return f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind port min = {osd_port}
ms bind port max = {min(osd_port + OSD_PORTS, 65535)}
auth cluster required = none
auth service required = none
auth client required = none
# a daemon's default to its monitor is "secure", which needs keys
ms mon client mode = crc
keyring = /dev/null
admin socket =
run dir = {directory}
log file = {directory}/log/$name.log
mon cluster log file = {directory}/log/cluster.log
mon data = {directory}/$name
osd data = {directory}/$name
paxos propose interval = 0.01
paxos min wait = 0.01
mon data avail warn = 0
mon data avail crit = 0
mon allow pool size one = true
mon max pg per osd = 1000
osd objectstore = memstore
memstore device bytes = 4294967296
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 1
osd pool default pgp num = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0

[client.rgw]
# without tcp_nodelay a small GET's answer waits for the client's delayed ACK
rgw frontends = beast endpoint=127.0.0.1:{gateway_port} tcp_nodelay=1
rgw thread pool size = 32
rgw enable gc threads = false
rgw enable lc threads = false
rgw dynamic resharding = false
"""
