"""A vertical-FL guest written only from privfl's protocol documents (docs/protocol.md).

An interoperability exercise: it shares no code with ``privfl`` and uses only
pyzmq, msgpack, gmpy2, numpy, scikit-learn and rfc8785.  Usage::

    python examples/independent_guest.py --job kit/job.toml --party guest-1 --out run/g [--resume]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import secrets
import struct
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import gmpy2
import msgpack
import numpy as np
import rfc8785
import zmq
import zmq.auth

VERSION = 7  # the envelope's protocol version (§4, §5.1)
LINK = struct.Struct(">2sBBQQII")
CHUNK = 1 << 20
SLOT, BOUND = 95, 88
EXPECTED = {  # body fields of the kinds a guest receives (§6); * = defaulted
    "public_key": ["n", "bits", "*h_s", "*plan_commits", "*mask_seeds", "proof"],
    "resume": ["completed"],
    "plan_reveal": ["shares"], "audit_head": ["seq", "head", "*stage"],
    "batch": ["epoch", "batch", "n_batches", "indices"],
    "residual": ["epoch", "batch", "residual", "others"],
    "decrypted": ["epoch", "batch", "purpose", "values"],
    "score_request": ["epoch", "split"], "finish": ["epochs", "reason"], "abort": ["reason"],
    "progress": ["step", "done", "total"],
}  # fmt: skip
DEFAULTS: dict[str, Any] = {"key_bits": 2048, "allow_weak_keys": False,
                            "seed": 0, "keys_dir": "keys", "obfuscation": "standard"}  # fmt: skip
TABLE_DEFAULTS: dict[str, dict[str, Any]] = {
    "training": {"epochs": 30, "learning_rate": 0.3, "lr_decay": 0.02, "l2": 0.1, "batch_size": 0,
                 "allow_small_batches": False, "tolerance": 1e-6, "divergence_factor": 2.0},
    "label_dp": {"epsilon": 1.5, "flipback_every": 5, "flipback_fraction": 0.02},
    "data": {"dataset": "breast_cancer", "test_size": 0.25, "split_seed": 0, "psi": "ecdh",
             "psi_key_bits": 2048},
}  # fmt: skip


class Fatal(Exception):  # a protocol violation or local error: abort the session
    pass


class PeerAborted(Exception):  # a peer sent abort
    pass


# ---------------------------------------------------------------- job, data (§2)
def canonical_job(job: dict[str, Any]) -> bytes:
    doc: dict[str, Any] = {"session": job["session"]}
    doc.update({k: job.get(k, v) for k, v in DEFAULTS.items()})
    for table, dflt in TABLE_DEFAULTS.items():
        doc[table] = {k: job.get(table, {}).get(k, v) for k, v in dflt.items()}
    doc["parties"] = {}
    for name, p in job["parties"].items():
        q = {"role": p["role"], "endpoint": p["endpoint"], "columns": p.get("columns", [])}
        if p["role"] != "server":
            q["max_ids"] = p.get("max_ids", 10000)
            q["feature_count"] = p.get("feature_count", 0)
        doc["parties"][name] = q

    def fix(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, float) and math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v

    return rfc8785.dumps(fix(doc))


def plan_commit(session: str, party: str, share: bytes) -> str:
    """§6.1a: SHA-256("privfl-plan-commit" ‖ 0 ‖ session ‖ 0 ‖ party ‖ 0 ‖ share), hex."""
    parts = [b"privfl-plan-commit", session.encode(), party.encode(), share]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def zero_sum_masks(
    session: str,
    me: str,
    guests: list[str],
    seeds: dict[str, bytes],
    label: str,
    n: int,
    count: int,
) -> list[int]:
    """§6.2a: + the SHAKE-256 stream of each pair we come first in, − of each we come second."""
    width, out = (n.bit_length() + 128 + 7) // 8, [0] * count
    for peer, seed in seeds.items():
        a, b = sorted((me, peer), key=guests.index)
        text = b"privfl-guest-mask\0" + seed + f"{session}\0{a}\0{b}\0{label}".encode()
        data = hashlib.shake_256(text).digest(width * count)
        sign = 1 if a == me else -1
        for i in range(count):
            out[i] = (out[i] + sign * int.from_bytes(data[i * width : (i + 1) * width], "big")) % n
    return out


def rows_digest(session: str, train: list[str], test: list[str]) -> str:
    out = b"privfl-rows-v1\x00" + struct.pack(">I", len(session.encode())) + session.encode()
    for ids in (train, test):
        out += struct.pack(">Q", len(ids))
        for i in ids:
            out += struct.pack(">I", len(i.encode())) + i.encode()
    return hashlib.sha256(out).hexdigest()


def load_demo(
    columns: list[int], test_size: float, split_seed: int
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    from sklearn.datasets import load_breast_cancer

    x = load_breast_cancer().data[:, columns].astype(np.float64)
    perm = np.random.RandomState(split_seed).permutation(len(x))
    n_test = math.ceil(test_size * len(x))
    test, train = perm[:n_test], perm[n_test:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    std[std == 0] = 1.0
    x = (x - mean) / std
    return x[train], x[test], [str(i) for i in train], [str(i) for i in test]


# ---------------------------------------------------------------- body codec (§5)
def bigints(vals: list[int]) -> msgpack.ExtType:
    w = max([1] + [(int(v).bit_length() + 7) // 8 for v in vals])
    raw = b"".join(int(v).to_bytes(w, "big") for v in vals)
    return msgpack.ExtType(2, struct.pack(">I", w) + raw)


def int64s(vals: list[int]) -> msgpack.ExtType:
    a = np.asarray(vals, dtype="<i8")
    return msgpack.ExtType(1, msgpack.packb(["<i8", list(a.shape), a.tobytes()]))


def ext_hook(code: int, data: bytes) -> Any:
    if code == 3:
        return int.from_bytes(data, "big", signed=True)
    if code == 2:
        (w,) = struct.unpack(">I", data[:4])
        body = data[4:]
        if not 1 <= w <= 1024 or len(body) % w:
            raise ValueError("bad BigInts")
        return [int.from_bytes(body[i : i + w], "big") for i in range(0, len(body), w)]
    if code == 1:
        dtype, shape, raw = msgpack.unpackb(data, raw=False)
        if dtype not in ("<i8", "<i4", "<f8", "<f4", "|b1", "|u1"):
            raise ValueError("dtype not allowed")
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    raise ValueError(f"unknown ext type {code}")


# ---------------------------------------------------------------- Paillier helpers (§6.0, §13)
def check_modulus_proof(n: int, roots: list[int], session: str, role: str) -> None:
    """§6.0's modulus proof: no prime factor below 65537, not prime, σ_i^n ≡ ρ_i (mod n) for 8
    points."""
    small = math.prod(p for p in range(3, 65537, 2) if gmpy2.is_prime(p))
    if n % 2 == 0 or math.gcd(n, small) != 1 or gmpy2.is_prime(n, 25) or len(roots) != 8:
        raise Fatal("the server's key is prime, has a small factor or no 8-root proof")
    w = (n.bit_length() + 7) // 8
    fields = [b"privfl/paillier-n/v1", n.to_bytes(w, "big"), session.encode(), role.encode()]
    prefix = b"".join(struct.pack(">Q", len(f)) + f for f in fields)
    for i, sigma in enumerate(roots):
        xof = hashlib.shake_256(prefix + struct.pack(">I", i)).digest(w + 16)
        rho = int.from_bytes(xof, "big") % n
        if math.gcd(rho, n) != 1 or not 0 < sigma < n or gmpy2.powmod(sigma, n, n) != rho:
            raise Fatal("the server's modulus proof does not verify: its key is refused")


class Key:
    def __init__(self, n: int, h_s: int) -> None:
        self.n, self.n2, self.h_s = gmpy2.mpz(n), gmpy2.mpz(n) ** 2, gmpy2.mpz(h_s)
        self.k = (n.bit_length() - 1) // SLOT
        self.half_bits = (n.bit_length() + 1) // 2

    def obf(self) -> Any:
        if self.h_s:
            return gmpy2.powmod(self.h_s, secrets.randbits(self.half_bits), self.n2)
        while True:
            r = gmpy2.mpz(secrets.randbelow(int(self.n)))
            if r > 1 and gmpy2.gcd(r, self.n) == 1:
                return gmpy2.powmod(r, self.n, self.n2)

    def enc(self, m: int) -> int:
        return int((1 + self.n * (gmpy2.mpz(m) % self.n)) * self.obf() % self.n2)

    def rerand(self, c: Any) -> int:
        return int(gmpy2.mpz(c) * self.obf() % self.n2)

    def dot(self, cs: list[int], exps: Any) -> Any:
        acc = gmpy2.mpz(1)
        for c, x in zip(cs, exps, strict=True):
            acc = acc * gmpy2.powmod(c, int(x), self.n2) % self.n2
        return acc

    def pack_under(self, cs: list[Any]) -> Any:
        acc = gmpy2.mpz(cs[-1])
        for c in reversed(cs[:-1]):
            acc = gmpy2.powmod(acc, 1 << SLOT, self.n2) * c % self.n2
        offset = sum((1 << BOUND) << (SLOT * i) for i in range(len(cs)))
        return acc * (1 + self.n * offset) % self.n2


def fx(v: float, bits: int) -> int:
    return int(np.rint(v * 2.0**bits))


# ---------------------------------------------------------------- link layer and sockets (§2-§4)
def zap_handler(ctx: zmq.Context[Any], allowed: dict[bytes, str], stop: threading.Event) -> None:
    sock = ctx.socket(zmq.REP)
    sock.bind("inproc://zeromq.zap.01")
    while not stop.is_set():
        if not sock.poll(100):
            continue
        f = sock.recv_multipart()
        version, req, domain, mech = f[0], f[1], f[2], f[5]
        name = allowed.get(f[6]) if mech == b"CURVE" and len(f) > 6 else None
        ok = domain == b"privfl" and name is not None
        if not ok:
            print(f"refused a connection (domain {domain!r}, mechanism {mech!r})", file=sys.stderr)
        status = [b"200", b"OK"] if ok else [b"400", b"denied"]
        sock.send_multipart([version, req, *status, (name or "").encode(), b""])
    sock.close(0)


class Link:
    def __init__(self, job: dict[str, Any], me: str, keys_dir: Path) -> None:
        self.me, self.session = me, job["session"]
        self.ctx = zmq.Context()
        pub, sec = zmq.auth.load_certificate(str(keys_dir / f"{me}.key_secret"))
        peers = [p for p in job["parties"] if p != me]
        keys = {p: zmq.auth.load_certificate(str(keys_dir / f"{p}.key"))[0] for p in job["parties"]}
        self.stop = threading.Event()
        allowed = {zmq.utils.z85.decode(k): p for p, k in keys.items()}
        args = (self.ctx, allowed, self.stop)
        self.zap = threading.Thread(target=zap_handler, args=args, daemon=True)
        self.zap.start()
        time.sleep(0.05)
        self.inbox = self.ctx.socket(zmq.ROUTER)
        self.inbox.curve_server = True
        self.inbox.curve_secretkey, self.inbox.curve_publickey = sec, pub
        self.inbox.zap_domain = b"privfl"
        self.inbox.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        self.inbox.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.inbox.setsockopt(zmq.MAXMSGSIZE, CHUNK + 64)
        self.inbox.bind(job["parties"][me]["endpoint"])
        self.out: dict[str, zmq.Socket[Any]] = {}
        for p in peers:
            d = self.ctx.socket(zmq.DEALER)
            d.routing_id = f"{me}/{secrets.token_hex(16)}".encode()
            d.curve_secretkey, d.curve_publickey, d.curve_serverkey = sec, pub, keys[p]
            d.setsockopt(zmq.IMMEDIATE, 1)
            d.setsockopt(zmq.LINGER, 500)
            d.connect(job["parties"][p]["endpoint"])
            self.out[p] = d
        self.inc = secrets.randbits(64)
        self.seq = {p: 0 for p in peers}
        self.msg_id = 0
        # (peer, seq) -> [chunks, next send time, next delay, first sent]
        self.unacked: dict[tuple[str, int], list[Any]] = {}
        self.partial: dict[tuple[str, int, int], dict[int, bytes]] = {}
        self.delivered: dict[str, set[Any]] = {p: set() for p in peers}
        self.seen_ids: set[Any] = set()

    def send(self, peer: str, kind: str, rnd: int, body: dict[str, Any]) -> None:
        self.msg_id += 1
        head = {"protocol": "privfl", "version": VERSION, "session": self.session,
                "sender": self.me, "receiver": peer, "round": rnd, "msg_id": self.msg_id,
                "kind": kind}  # fmt: skip
        frames = [msgpack.packb(head), msgpack.packb(body)]
        payload = struct.pack(">I", 2) + b"".join(struct.pack(">I", len(f)) + f for f in frames)
        self.seq[peer] += 1
        seq = self.seq[peer]
        parts = [payload[i : i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
        hdr = [LINK.pack(b"PL", 1, 1, self.inc, seq, i, len(parts)) for i in range(len(parts))]
        chunks = [[h, c] for h, c in zip(hdr, parts, strict=True)]
        self.unacked[(peer, seq)] = [chunks, 0.0, 2.0, time.monotonic()]
        self._pump()

    def _pump(self) -> None:
        now = time.monotonic()
        for (peer, _), ent in self.unacked.items():
            if ent[1] <= now:
                try:
                    for c in ent[0]:
                        self.out[peer].send_multipart(c, zmq.NOBLOCK)
                    ent[1], ent[2] = now + ent[2], min(ent[2] * 2, 30.0)
                except zmq.Again:
                    ent[1] = now + 0.1  # no connection yet (IMMEDIATE): retry soon

    def recv(self, timeout: float) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        """One valid message (sender, header, body), or None on timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self._pump()
            if not self.inbox.poll(100):
                continue
            frames = self.inbox.recv_multipart(copy=False)
            msg = self._on_frames(frames)
            if msg is not None:
                return msg
        return None

    def _on_frames(self, frames: list[Any]) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        user = frames[-1].get("User-Id")
        rid = frames[0].bytes.decode(errors="replace").split("/")[0]
        if len(frames) != 3 or user != rid or user not in self.out:
            return None
        if len(frames[1].bytes) != LINK.size:
            return None
        magic, ver, typ, inc, seq, idx, count = LINK.unpack(frames[1].bytes)
        if typ == 2 and inc == self.inc and magic == b"PL" and ver == 1:
            self.unacked.pop((user, seq), None)
        if magic != b"PL" or ver != 1 or typ != 1 or not 1 <= count <= 80 or idx >= count:
            return None
        if len(frames[2].bytes) > CHUNK:
            return None
        ack = [LINK.pack(b"PL", 1, 2, inc, seq, 0, 0), b""]
        if (inc, seq) in self.delivered[user]:
            self.out[user].send_multipart(ack)
            return None
        part = self.partial.setdefault((user, inc, seq), {})
        part[idx] = frames[2].bytes
        if len(part) < count:
            return None
        del self.partial[(user, inc, seq)]
        self.delivered[user].add((inc, seq))
        self.out[user].send_multipart(ack)
        payload = b"".join(part[i] for i in range(count))
        try:
            (nf,) = struct.unpack(">I", payload[:4])
            pos, fr = 4, []
            for _ in range(nf):
                (ln,) = struct.unpack(">I", payload[pos : pos + 4])
                fr.append(payload[pos + 4 : pos + 4 + ln])
                pos += 4 + ln
            if pos != len(payload) or nf != 2 or len(fr[0]) > 4096:
                raise ValueError("bad frames")
            return self._envelope(user, fr)
        except (ValueError, struct.error, msgpack.UnpackException, TypeError, KeyError) as e:
            print(f"{self.me}: refused a message from {user}: {e}", file=sys.stderr)
            return None

    def _envelope(self, user: str, fr: list[bytes]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        h = msgpack.unpackb(fr[0], raw=False)
        keys = ["protocol", "version", "session", "sender", "receiver", "round", "msg_id", "kind"]
        if not isinstance(h, dict) or list(h) != keys:
            raise ValueError("header keys")
        if h["protocol"] != "privfl" or h["version"] != VERSION or h["kind"] not in EXPECTED:
            raise ValueError("protocol, version or kind")
        if h["session"] != self.session:
            raise ValueError(f"session {h['session']!r} is not ours")
        if h["receiver"] != self.me or h["sender"] != user:
            raise ValueError("receiver or sender")
        if (user, h["msg_id"]) in self.seen_ids:
            raise ValueError(f"duplicate message id {h['msg_id']}")
        body = msgpack.unpackb(fr[1], raw=False, ext_hook=ext_hook, strict_map_key=True)
        want = EXPECTED[h["kind"]]
        must = {f for f in want if not f.startswith("*")}
        allowed = must | {f[1:] for f in want if f.startswith("*")}
        if not isinstance(body, dict) or not must <= set(body) <= allowed:
            raise ValueError(f"{h['kind']} body must have exactly the fields {sorted(must)}")
        if "epoch" in body and body["epoch"] != h["round"]:
            raise ValueError("round differs from the body's epoch")
        self.seen_ids.add((user, h["msg_id"]))
        return user, h, body

    def close(self) -> None:
        end = time.monotonic() + 1.0
        while self.unacked and time.monotonic() < end:
            if not any(time.monotonic() - e[3] < 2.0 for e in self.unacked.values()):
                break
            if self.inbox.poll(50):
                self._on_frames(self.inbox.recv_multipart(copy=False))
            self._pump()
        for s in [self.inbox, *self.out.values()]:
            s.close(500)
        self.stop.set()
        self.zap.join(1)
        self.ctx.term()


# ---------------------------------------------------------------- the guest (§7.3, §13)
class Guest:
    def __init__(self, job_path: Path, me: str, out: Path, resume: bool) -> None:
        self.job = tomllib.loads(job_path.read_text())
        self.me, self.out, self.resume = me, out, resume
        self.tr = self.job.get("training", {})
        d = self.job.get("data", {})
        cols = self.job["parties"][me].get("columns", [])
        split = (d.get("test_size", 0.25), d.get("split_seed", 0))
        self.xtr, self.xte, tr_ids, te_ids = load_demo(cols, *split)
        self.digest = rows_digest(self.job["session"], tr_ids, te_ids)
        self.fp = hashlib.sha256(canonical_job(self.job)).hexdigest()
        self.theta = np.zeros(self.xtr.shape[1])
        self.timeout = float(self.job.get("timeout_seconds", 120.0))
        self.server = next(p for p, v in self.job["parties"].items() if v["role"] == "server")
        self.host = next(p for p, v in self.job["parties"].items() if v["role"] == "host")
        self.guests = [p for p, v in self.job["parties"].items() if v["role"] == "guest"]
        self.seeds: dict[str, bytes] = {}  # pairwise mask seeds from the Server (§6.2a)
        keys_dir = job_path.parent / self.job.get("keys_dir", "keys")
        self.link = Link(self.job, me, keys_dir)
        self.early: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.heard: dict[str, dict[str, Any]] = {}  # the last progress of each peer
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)

    def await_kind(
        self, kinds: set[str], sender: str, timeout: float | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        for i, (s, h, b) in enumerate(self.early):
            if h["kind"] in kinds and s == sender:
                del self.early[i]
                return h, b
        end = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < end:
            msg = self.link.recv(end - time.monotonic())
            if msg is None:
                break
            s, h, b = msg
            if h["kind"] == "abort":
                raise PeerAborted(f"peer {s} stopped: {b['reason']}")
            if h["kind"] == "audit_head":  # for the audit log only (§6.4); this guest keeps none
                continue
            if h["kind"] == "progress":  # busy is not dead (§8): a change restarts the clock
                if self.heard.get(s) != b:
                    self.heard[s], end = b, max(end, time.monotonic() + (timeout or self.timeout))
                continue
            if h["kind"] in kinds and s == sender:
                return h, b
            self.early.append(msg)
        late = sorted({p for (p, _), e in self.link.unacked.items() if time.monotonic() - e[3] > 2})
        note = f"; not acknowledging: {', '.join(late)}" if late else ""
        raise Fatal(f"timed out waiting for {sender} ({'/'.join(sorted(kinds))}){note}")

    def run(self) -> int:
        try:
            self.session()
            return 0
        except PeerAborted as e:
            print(f"{self.me}: {e}", file=sys.stderr)
            self.link.close()
            return 1
        except (Fatal, ValueError, TypeError, KeyError, ArithmeticError) as e:
            print(f"{self.me}: error: {e}", file=sys.stderr)
            for p in self.link.out:
                self.link.send(p, "abort", 0, {"reason": f"{self.me}: {e}"})
            self.link.close()
            return 1

    def session(self) -> None:
        share = self.plan_share()
        commit = plan_commit(self.link.session, self.me, share)
        hello = {"role": "guest", "job_fingerprint": self.fp, "rows": len(self.xtr) + len(self.xte),
                 "features": self.xtr.shape[1], "rows_digest": self.digest,
                 "train_rows": len(self.xtr), "plan_commit": commit}  # fmt: skip
        for p in (self.server, self.host):
            self.link.send(p, "hello", 0, hello)
        _, pk = self.await_kind({"public_key"}, self.server, 2 * self.timeout)
        n, h_s = pk["n"], pk.get("h_s", 0)
        if n % 2 == 0 or n.bit_length() < 256 or pk["bits"] < self.job.get("key_bits", 2048):
            raise Fatal("the server's public key is too small or malformed")
        if bool(h_s) != (self.job.get("obfuscation", "standard") == "djn"):
            raise Fatal("the server's key does not match the job's obfuscation mode")
        if h_s and not (1 < h_s < n * n and math.gcd(h_s, n) == 1):
            raise Fatal("the server's h_s is invalid")
        check_modulus_proof(n, pk["proof"], self.link.session, f"public_key/{self.server}")
        self.key = Key(n, h_s)
        seeds = dict(item.split("=", 1) for item in pk.get("mask_seeds", "").split(",") if item)
        if set(seeds) != set(self.guests) - {self.me}:
            raise Fatal("the server's mask_seeds do not name exactly the other guests (§6.2a)")
        self.seeds = {peer: bytes.fromhex(seed) for peer, seed in seeds.items()}
        self.reveal_plan(pk.get("plan_commits", ""), share, commit)
        offered = self.checkpoints() if self.resume else []
        self.link.send(self.host, "checkpoints", 0, {"completed": int64s(offered)})
        _, rs = self.await_kind({"resume"}, self.host)
        if rs["completed"]:
            if rs["completed"] not in offered:
                raise Fatal(f"resume {rs['completed']} is not a checkpoint we offered")
            path = self.out / "checkpoints" / f"epoch-{rs['completed']:05d}.json"
            self.theta = np.array(json.loads(path.read_text())["theta"])
            for c in offered:
                if c > rs["completed"]:
                    (self.out / "checkpoints" / f"epoch-{c:05d}.json").unlink()
        while True:
            h, b = self.await_kind({"batch", "score_request", "finish"}, self.host)
            if h["kind"] == "finish":
                (self.out / "model.json").write_text(json.dumps({"theta": self.theta.tolist()}))
                self.link.close()
                return
            if h["kind"] == "score_request":
                self.scores(b)
            else:
                self.train_batch(h, b)

    def plan_share(self) -> bytes:
        """Our 32-byte share of the batch plan's seed (§6.1a), kept for a resumed session."""
        path = self.out / "checkpoints" / "plan-share.json"
        if self.resume and path.is_file():
            return bytes.fromhex(json.loads(path.read_text())["share"])
        share = secrets.token_bytes(32)
        path.write_text(json.dumps({"share": share.hex()}))
        path.chmod(0o600)
        return share

    def reveal_plan(self, relayed: str, share: bytes, commit: str) -> None:
        """§6.1a steps 2–3: check the relayed commitments, reveal ours, check every share.

        This example does not derive the joint plan itself, so it does not hold the
        Host's batches to it (privfl's own guest does: §6.2); it checks the openings.
        """
        commits = dict(item.split("=", 1) for item in relayed.split(",") if item)
        if commits.get(self.me) != commit or set(commits) != {self.host, *self.guests}:
            raise Fatal("the relayed batch-plan commitments are not the session's")
        self.link.send(self.host, "plan_reveal", 0, {"shares": f"{self.me}={share.hex()}"})
        _, rv = self.await_kind({"plan_reveal"}, self.host)
        shares = dict(item.split("=", 1) for item in rv["shares"].split(","))
        if set(shares) != set(commits) or shares[self.me] != share.hex():
            raise Fatal(f"{self.host} revealed other shares than the session's")
        for party, value in shares.items():
            if plan_commit(self.link.session, party, bytes.fromhex(value)) != commits[party]:
                raise Fatal(f"{self.host} revealed a share that does not open {party}'s commit")

    def checkpoints(self) -> list[int]:
        files = (self.out / "checkpoints").glob("epoch-*.json")
        return sorted(int(p.stem.split("-")[1]) for p in files)

    def train_batch(self, h: dict[str, Any], b: dict[str, Any]) -> None:
        e, key = b["epoch"], self.key
        rows = b["indices"] if b["indices"] is not None else np.arange(len(self.xtr))
        idx = np.asarray(rows, dtype=np.int64)
        if idx.ndim != 1 or len(idx) == 0 or idx.min() < 0 or idx.max() >= len(self.xtr):
            raise Fatal("batch indices outside our training rows")
        x = self.xtr[idx]
        z, where = x @ self.theta, f"{e}/{b['batch']}"
        m_z = self.masks(f"forward/{where}", len(z))
        scores = bigints([key.enc(fx(v, 32) + m) for v, m in zip(z, m_z, strict=True)])
        square = fx(float(np.sum(z * z)), 48) + self.masks(f"squares/{where}")[0]
        sum_sq = bigints([key.enc(square)])
        fwd = {"epoch": e, "batch": b["batch"], "scores": scores, "sum_squares": sum_sq}
        self.link.send(self.host, "forward", e, fwd)
        _, r = self.await_kind({"residual"}, self.host)
        if (r["epoch"], r["batch"]) != (e, b["batch"]) or len(r["residual"]) != len(idx):
            got = len(r["residual"])
            raise Fatal(f"residual of the wrong batch or length ({got}, expected {len(idx)})")
        if r["others"] is not None and len(r["others"]) != len(idx):
            raise Fatal("residual.others of the wrong length")
        xe = np.rint(x * 2.0**16).astype(np.int64)
        grads = [key.dot(r["residual"], xe[:, j]) for j in range(x.shape[1])]
        masks = [secrets.randbelow(int(key.n)) for _ in range(0, len(grads), key.k)]
        packed = [  # pack under encryption, mask, re-randomise last (§6.0)
            key.rerand(key.pack_under(grads[p * key.k : (p + 1) * key.k]) * (1 + key.n * rm))
            for p, rm in enumerate(masks)
        ]
        req = {"epoch": e, "batch": b["batch"], "purpose": "gradient", "values": bigints(packed)}
        self.link.send(self.server, "decrypt_request", e, req)
        if r["others"] is not None:
            exps = [fx(zi, 16) for zi in z]  # others is Z − z − M: add back Σ M·x, and our mask
            own = sum(m * x for m, x in zip(m_z, exps, strict=True))
            own += self.masks(f"cross/{where}")[0]
            acc = key.dot(r["others"], exps) * (1 + key.n * (own % key.n)) % key.n2
            cross = {"epoch": e, "batch": b["batch"], "value": bigints([key.rerand(acc)])}
            self.link.send(self.host, "cross_term", e, cross)
        _, d = self.await_kind({"decrypted"}, self.server)
        if len(d["values"]) != len(masks):
            raise Fatal("decrypted has the wrong length")
        plain = [(m - rm) % int(key.n) for m, rm in zip(d["values"], masks, strict=True)]
        g4 = self.unpack(plain, x.shape[1], 1) / 2.0**48
        bsz, lam = len(idx), self.tr.get("l2", 0.1)
        grad = g4 / (4 * bsz) + lam * self.theta / bsz
        lr_e = self.tr.get("learning_rate", 0.3) / (1 + self.tr.get("lr_decay", 0.02) * e)
        self.theta = self.theta - lr_e * grad
        if b["batch"] == b["n_batches"] - 1:
            self.save_checkpoint(e + 1)

    def unpack(self, packed: list[int], count: int, terms: int) -> np.ndarray:
        k, out = self.key.k, []
        if len(packed) != -(-count // k):
            raise Fatal("wrong number of packed values")
        for p, val in enumerate(packed):
            used = min(k, count - p * k)
            if val >= 1 << (SLOT * used):
                raise Fatal("packed value out of range (diverged or corrupt peer)")
            for i in range(used):
                v = ((val >> (SLOT * i)) & ((1 << SLOT) - 1)) - terms * (1 << BOUND)
                if abs(v) >= terms * (1 << BOUND):
                    raise Fatal("slot out of range")
                out.append(v)
        return np.array(out, dtype=np.float64)

    def scores(self, b: dict[str, Any]) -> None:
        x = self.xtr if b["split"] == "train" else self.xte
        z, key = x @ self.theta, self.key
        vals = [fx(v, 32) + (1 << BOUND) for v in z]
        groups = [vals[p : p + key.k] for p in range(0, len(vals), key.k)]
        packed = [sum(v << (SLOT * i) for i, v in enumerate(g)) for g in groups]
        masks = self.masks(f"scores/{b['epoch']}/{b['split']}", len(packed))
        enc = bigints([key.enc(v + m) for v, m in zip(packed, masks, strict=True)])
        self.link.send(self.host, "scores", b["epoch"], {**b, "scores": enc})

    def masks(self, label: str, count: int = 1) -> list[int]:
        """Our zero-sum masks for ``label`` (§6.2a); zeros with one guest."""
        n = int(self.key.n)
        return zero_sum_masks(self.link.session, self.me, self.guests, self.seeds, label, n, count)

    def save_checkpoint(self, completed: int) -> None:
        d = self.out / "checkpoints"
        tmp = d / f".epoch-{completed:05d}.tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(json.dumps({"completed": completed, "theta": self.theta.tolist()}))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / f"epoch-{completed:05d}.json")
        for old in self.checkpoints()[:-3]:
            (d / f"epoch-{old:05d}.json").unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--job", type=Path, required=True)
    ap.add_argument("--party", required=True)
    ap.add_argument("--out", type=Path, default=Path("run/independent-guest"))
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args()
    return Guest(a.job, a.party, a.out, a.resume).run()


if __name__ == "__main__":
    sys.exit(main())
