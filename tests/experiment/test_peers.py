"""The watch of `jaxjudge.peers` against a stand-in for the coordination service's key-value
store, with the beat shortened (0.2 s) so that each case takes about a second: a peer whose
beat stops is named; a service that fails, or stops answering (a call into a hung process 0
blocks), names process 0. Each ends the watching process with one line and `LOST_EXIT`
(``os._exit`` stood in for). The same watch over two real processes: tests/cli/test_cli_lost_host.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from jaxjudge import peers

BEAT = 0.2
AFTER = 1.0


class Service:
    """The coordination service's key-value store; ``state`` "up", "failing" or "hung"."""

    def __init__(self):
        self.kv: dict[str, str] = {}
        self.state = "up"
        self.lock = threading.Lock()
        self.never = threading.Event()

    def _reach(self) -> None:
        if self.state == "hung":
            self.never.wait()  # blocks like a call into a stopped process (released at the end)
        if self.state == "failing":
            raise RuntimeError("UNAVAILABLE: failed to connect to all addresses\nsecond line")

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        self._reach()
        with self.lock:
            self.kv[key] = value

    def key_value_dir_get(self, prefix: str) -> list[tuple[str, str]]:
        self._reach()
        with self.lock:
            return [(k, v) for k, v in self.kv.items() if k.startswith(prefix)]


@pytest.fixture
def watched(monkeypatch):
    """``(service, start, beating, ended, done)``: ``start(me, n)`` watches from process ``me``
    of ``n``; the other processes' beats are written here every half `BEAT` while ``beating``
    holds them; ``ended`` gets ``(exit status, time)`` when the watch ends the process, and
    ``done`` is set then."""
    monkeypatch.setattr(peers, "BEAT_S", BEAT)
    monkeypatch.setenv("JAXJUDGE_LOST_AFTER_S", str(AFTER))
    service, ended, done = Service(), [], threading.Event()
    beating: set[int] = set()

    watches = []

    def exit_(code):  # the process would end here: the watch stops instead
        ended.append((code, time.monotonic()))
        done.set()
        for w in watches:
            w.stopped.set()

    monkeypatch.setattr(peers.os, "_exit", exit_)

    def beat():
        n = 0
        while not done.is_set():
            n += 1
            with service.lock:
                for p in list(beating):
                    service.kv[f"jaxjudge/peers/beat/{p}"] = str(n)
            time.sleep(BEAT / 2)

    threading.Thread(target=beat, daemon=True).start()

    def start(me: int, n: int):
        beating.update(p for p in range(n) if p != me)
        w = peers._Watch(service, n, me)
        w.thread.start()
        watches.append(w)
        return w

    yield service, start, beating, ended, done
    done.set()
    service.never.set()
    for w in watches:
        w.stopped.set()


@pytest.mark.parametrize("what", ["silent peer", "failing service", "hung service"])
def test_a_lost_peer_or_service_ends_the_watch_in_one_line(watched, capsys, what):
    service, start, beating, ended, done = watched
    start(me=1, n=3)
    time.sleep(4 * BEAT)
    assert not ended  # every peer beating, the service answering
    t0 = time.monotonic()
    if what == "silent peer":
        beating.discard(2)
    else:
        service.state = what.split()[0]
    assert done.wait(AFTER + 20 * BEAT), f"{what}: the watch did not end the process"
    (code, when), = ended
    line = capsys.readouterr().err.strip()
    assert code == peers.LOST_EXIT and len(line.splitlines()) == 1
    # The silence is measured from the last beat the watch saw, up to one beat before the change;
    # the upper bound leaves a loaded machine's scheduling some room (JAX's own abort: 100 s).
    assert AFTER - BEAT <= when - t0 <= AFTER + 8 * BEAT
    assert line.endswith("process 1 stops: the chunks published so far are kept, start every process again "
                         "to compute the rest")
    expected = {
        "silent peer": f"jaxjudge: process 2 of 3 lost (no heartbeat for {AFTER:g} s)",
        "failing service": ("jaxjudge: process 0 of 3 lost (the coordination service stopped answering: "
                            "UNAVAILABLE: failed to connect to all addresses)"),
        "hung service": "jaxjudge: process 0 of 3 lost (the coordination service has not answered for ",
    }[what]
    assert line.startswith(expected), line


def test_a_peer_that_marked_itself_done_is_not_waited_for_and_process_0_outlives_the_service(watched):
    service, start, beating, ended, done = watched
    start(me=0, n=2)
    time.sleep(4 * BEAT)
    with service.lock:
        service.kv["jaxjudge/peers/done/1"] = "1"
    beating.discard(1)
    time.sleep(AFTER + 4 * BEAT)
    assert not ended  # process 1 ended on purpose
    service.state = "failing"  # process 0 hosts the service: it never names itself
    time.sleep(AFTER + 4 * BEAT)
    assert not ended
