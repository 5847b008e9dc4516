"""The claim protocol under faults: two workers share one store in a bucket (the emulator of
tests/conftest.py) through a proxy (tests/store/fault_proxy.py) that drops the answers of
writes the server applied (claim creates, claim renewals, chunk creates), answers 503 and 429,
and delays reads. Every chunk is computed once and published once, no claim is taken over (no
chunk waits for a lease: a worker recognises its own retried write by the record inside it), the
store holds what a clean run computes, and no claim is left behind. Also: a holder whose renewal
is refused stops (its chunk is not published by it), and a renewal's error that is not transient
ends the claim instead of being retried forever.

The workers are threads running `jaxjudge.store.work.claimed_chunks` with a chunk function fixed
by the chunk index: what is checked is the protocol, in seconds.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from jaxjudge.store import Store
from jaxjudge.store.work import claimed_chunks

from tests.store.fault_proxy import Rule, counted

N_CHUNKS = 8
LEASE = 12.0  # renewals every 2 s; a chunk that waited for a lease would show as a claim taken over
KEY = {"test": "faults"}


def _chunk(i: int) -> dict[str, np.ndarray]:
    return {"example_ids": np.asarray([f"e{i}-{k}" for k in range(3)]),
            "values": np.cos(np.arange(3 * i, 3 * i + 3, dtype=np.float32))}


def _rules() -> list[Rule]:
    claim_create = r"/upload/.*ifGenerationMatch=0 name=.*\.claim$"
    rewrite = r"/upload/.*ifGenerationMatch=[1-9]"  # only claims are rewritten (renewals, releases)
    return [Rule("dropped claim create", "POST", claim_create, "drop", times=3, every=2),
            Rule("dropped claim rewrite", "POST", rewrite, "drop", times=3, every=2),
            Rule("dropped chunk create", "POST", r"/upload/.* name=.*\.npz$", "drop", times=2, every=3),
            Rule("503 on a read", "GET", r"/storage/v1/b/|/download/", "503", times=4, every=5),
            Rule("429 on a write", "POST", r"/upload/", "429", times=3, every=4),
            Rule("delayed read", "GET", r"/storage/v1/b/|/download/", "delay", times=6, every=3)]


def test_two_workers_under_faults_publish_every_chunk_once(gcs_bucket, proxied):
    root = f"{gcs_bucket}/faults"
    stores = [Store.open(root, KEY, n_chunks=N_CHUNKS) for _ in range(2)]
    computed: list[tuple[int, int]] = []
    claims = []
    for w, st in enumerate(stores):  # every claim a worker takes, kept to look at afterwards
        take = st.claim_chunk
        st.claim_chunk = lambda i, _take=take, **kw: claims.append(c := _take(i, **kw)) or c

    def work(w: int) -> None:
        def make(i: int) -> dict[str, np.ndarray]:
            computed.append((w, i))
            threading.Event().wait(0.2)
            return _chunk(i)

        claimed_chunks(stores[w], range(N_CHUNKS), make, LEASE)

    proxied.rules = _rules()
    errors = []
    threads = [threading.Thread(target=lambda w=w: _catch(errors, work, w)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)  # a hang guard, not a timing: a stalled chunk is caught below
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    injected = proxied.injected()
    proxied.rules = []
    print(f"faults injected: {injected}; chunks computed: {sorted(computed)}")
    assert len(injected) == len(_rules()) and all(injected.values()), injected  # every planned fault happened
    assert sorted(i for _, i in computed) == list(range(N_CHUNKS)), computed  # each chunk computed once
    held = [c for c in claims if c is not None]
    assert not any(c.took_over or c.lost for c in held)  # nobody waited for a lease, nobody lost a claim
    st = Store.open(root, KEY, n_chunks=N_CHUNKS)
    assert st.missing_chunks() == []
    for i in range(N_CHUNKS):
        got = st.read_chunk(i)
        for k, v in _chunk(i).items():
            np.testing.assert_array_equal(got[k], v)
    assert not list(st.root.rglob("*.claim"))  # every claim released
    # Published once: per chunk, one create the server applied (its answer dropped or not).
    for i in range(N_CHUNKS):
        applied = counted(proxied.log, pattern=rf"/upload/.* name=.*/{i:06d}\.npz$")
        assert applied[200] + applied["drop 200"] == 1, (i, applied, [e for e in proxied.log if "npz" in e[1]][:5])


def _catch(errors: list, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def test_a_refused_renewal_stops_the_holder_and_a_lasting_error_ends_the_claim(gcs_bucket, monkeypatch):
    from google.api_core import exceptions

    st = Store.open(f"{gcs_bucket}/lost", KEY, n_chunks=2)
    published = []

    def make(i: int) -> dict[str, np.ndarray]:
        assert not st.has_chunk(i)  # the first computation, its claim lost, was not published
        if not published:  # another worker takes the claim over: the holder's next renewal is refused
            path = st.claim_path(i)
            assert path.rewrite(b'{"token": "someone else"}', path.generation()) is not None
            threading.Event().wait(0.5)  # a few renewals (every lease / 6)
        published.append(i)
        return _chunk(i)

    # The other "worker" never renews: after its lease this one takes the chunk back and publishes it.
    assert claimed_chunks(st, [0], make, 0.6) == [0]
    assert published == [0, 0] and st.has_chunk(0)

    # A renewal that fails for a reason that is not transient ends the claim (kept as its error).
    claim = st.claim_chunk(1, stale_after=0.6)

    def refuse(*_a, **_k):
        raise exceptions.Forbidden("no access")

    monkeypatch.setattr(type(claim.path), "rewrite", refuse)
    claim._thread.join(timeout=10)
    assert claim.lost and isinstance(claim.error, exceptions.Forbidden)
    monkeypatch.undo()
    claim.release()  # lost: nothing to release
