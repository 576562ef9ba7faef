"""Load generation for the comparisons: wrk when installed, else Python threads.

On 2 cores a Python client spends about as much CPU per request as a fast server, so
it would measure itself. wrk (C, keep-alive, one event-loop thread) costs a few
microseconds per request; its Lua scripts are generated here, into the run's temp dir.

Two shapes of load, each counting what the verification needs:

* ``cycle``: each connection sends requests from a fixed list, in turn (publish to one
  or several queues, a batch, the floor's GET). It counts requests sent, replies that
  acknowledged (200 with ``"error":""``; for a batch also one name per message),
  refusals (503, the api's back-pressure: nothing written) and bad replies. Files on
  disk must then be between acknowledged and sent but not refused.
* ``walk``: one connection follows a queue by pointer, the next ``after`` being the
  name in the previous reply's Content-Disposition, and records every name and the
  first bytes (the tag) of every body, so the caller can check order and content. At
  the end of the queue it starts again from the beginning.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import requests

from bench.harness import Operation, run_clients

OK = b'"error":""'
TIMEOUT = 60
DISPOSITION = re.compile(r'filename="([^"]+)"')


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path and query, e.g. "/?action=publish&q=x"
    body: bytes = b""
    content_type: str = ""


@dataclass
class Outcome:
    sent: int = 0
    acked: int = 0
    bad: int = 0
    refused: int = 0  # 503: the server's back-pressure (the request wrote nothing)
    socket_errors: int = 0  # connections that failed, were reset or timed out
    seconds: float = 0.0
    first_bad: str = ""
    names: list[str] = field(default_factory=list)  # walk: every message, in order
    tags: list[str] = field(default_factory=list)  # walk: the first bytes of each body
    wraps: int = 0  # walk: times it reached the end and started again


def generator() -> str:
    """What produces the load, for the table header."""
    if shutil.which("wrk"):
        version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout
        return f"wrk {version.split()[1] if version else ''} (1 thread, keep-alive, Lua)"
    return "Python threads + requests sessions (wrk not installed: the client shares the CPU)"


def batch_reply_ok(body: bytes, count: int) -> bool:
    """``"error":""`` and ``result`` lists one name per message, in order."""
    if OK not in body:
        return False
    try:
        names = json.loads(body)["result"]
    except (ValueError, KeyError, TypeError):
        return False
    if not isinstance(names, list) or len(names) != count:
        return False
    echoed = names == [f"m{i}" for i in range(count)]
    return echoed or all(a < b for a, b in itertools.pairwise(names))


def cycle(
    origin: str,
    requests_: list[Request],
    *,
    connections: int,
    seconds: float,
    workdir: Path,
    batch: int = 0,
) -> Outcome:
    """Send ``requests_`` in turn from ``connections`` keep-alive connections for ``seconds``."""
    if shutil.which("wrk"):
        return _wrk_cycle(origin, requests_, connections, seconds, workdir, batch)
    return _python_cycle(origin, requests_, connections, seconds, batch)


def walk(
    origin: str, prefix: str, *, seconds: float, workdir: Path, tag_bytes: int, tail: bytes
) -> Outcome:
    """Follow a queue by pointer (``prefix`` ends with ``after=``) from its start for ``seconds``.

    Every body must be ``tag_bytes`` of tag followed by ``tail``; one that is not counts
    as bad.
    """
    if shutil.which("wrk"):
        return _wrk_walk(origin, prefix, seconds, workdir, tag_bytes, tail)
    return _python_walk(origin, prefix, seconds, tag_bytes, tail)


# ---- wrk ------------------------------------------------------------------------------

LUA_COMMON = """
sent, acked, bad, refused, first_bad = 0, 0, 0, 0, ""
local function is_ok(status, body)
  return status == 200 and body:find('"error":""', 1, true) ~= nil
end
local function note_bad(status, body)
  if status == 503 then refused = refused + 1; return end
  bad = bad + 1
  if first_bad == "" then first_bad = status .. " " .. body:sub(1, 300) end
end
local threads = {}
function setup(thread) table.insert(threads, thread) end
local function totals()
  local t = {sent = 0, acked = 0, bad = 0, refused = 0, first_bad = ""}
  for _, thread in ipairs(threads) do
    for _, key in ipairs({"sent", "acked", "bad", "refused"}) do
      t[key] = t[key] + thread:get(key)
    end
    if t.first_bad == "" then t.first_bad = thread:get("first_bad") end
  end
  return t
end
local function report(summary, t, out)
  local e = summary.errors
  local f = assert(io.open(out .. ".bad", "wb")); f:write(t.first_bad); f:close()
  io.write(string.format(
    '\\nBENCH-RESULT {"sent":%d,"acked":%d,"bad":%d,"refused":%d,"seconds":%.6f,"wraps":%d,'
      .. '"socket_errors":%d}\\n',
    t.sent, t.acked, t.bad, t.refused, summary.duration / 1e6, t.wraps or 0,
    e.connect + e.read + e.write + e.timeout))
end
"""

LUA_CYCLE = """
local bodies, targets, types = {BODIES}, {TARGETS}, {TYPES}
local method, batch, out = {METHOD}, {BATCH}, {OUT}
local prepared, n = {}, 0
function init(args)
  for i = 1, #targets do
    local body = nil
    if bodies[i] ~= "" then
      local f = assert(io.open(bodies[i], "rb")); body = f:read("*a"); f:close()
    end
    local headers = {}
    if types[i] ~= "" then headers["Content-Type"] = types[i] end
    prepared[i] = wrk.format(method, targets[i], headers, body)
  end
end
function request()
  n = n % #prepared + 1
  sent = sent + 1
  return prepared[n]
end
local function batch_ok(body)
  local list = body:match('"result":%s*%[(.-)%]')
  if not list then return false end
  local count, echoed, increasing, last = 0, true, true, nil
  for name in list:gmatch('"([^"]*)"') do
    if name ~= "m" .. count then echoed = false end
    if last ~= nil and name <= last then increasing = false end
    count, last = count + 1, name
  end
  return count == batch and (echoed or increasing)
end
function response(status, headers, body)
  if is_ok(status, body) and (batch == 0 or batch_ok(body)) then
    acked = acked + 1
  else
    note_bad(status, body)
  end
end
function done(summary, latency, requests) report(summary, totals(), out) end
"""

LUA_WALK = """
local prefix, tag_bytes, tail, out = {PREFIX}, {TAG_BYTES}, {TAIL}, {OUT}
pointer, names, tags, wraps = "", {}, {}, 0
function request()
  sent = sent + 1
  return wrk.format("GET", prefix .. pointer)
end
function response(status, headers, body)
  local name = nil
  for key, value in pairs(headers) do
    if key:lower() == "content-disposition" then name = value:match('filename="([^"]+)"') end
  end
  if status == 200 and name then
    acked = acked + 1
    names[acked], tags[acked], pointer = name, body:sub(1, tag_bytes), name
    if #body ~= tag_bytes + #tail or body:sub(tag_bytes + 1) ~= tail then
      note_bad(status, "body of " .. name .. " differs")
    end
  elseif is_ok(status, body) then
    wraps, pointer = wraps + 1, ""
  else
    note_bad(status, body)
  end
end
function done(summary, latency, requests)
  local t = totals()
  local thread = threads[1]
  local names, tags = thread:get("names"), thread:get("tags")
  t.wraps = thread:get("wraps")
  local f = assert(io.open(out .. ".names", "wb"))
  for i = 1, #names do f:write(names[i], "\\t", tags[i], "\\n") end
  f:close()
  report(summary, t, out)
end
"""


def lua_string(value: str | bytes) -> str:
    """A Lua string literal of any bytes (decimal escapes for all but plain ASCII)."""
    data = value.encode() if isinstance(value, str) else value
    return (
        '"'
        + "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\{b:03d}" for b in data)
        + '"'
    )


def _lua_list(values: list[str]) -> str:
    return "{" + ", ".join(lua_string(value) for value in values) + "}"


def _fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


_counter = itertools.count()


def _wrk_cycle(
    origin: str,
    requests_: list[Request],
    connections: int,
    seconds: float,
    workdir: Path,
    batch: int,
) -> Outcome:
    run = workdir / f"wrk-{next(_counter)}"
    run.mkdir(parents=True)
    bodies = []
    for number, request in enumerate(requests_):
        path = ""
        if request.body:
            path = str(run / f"body-{number}")
            Path(path).write_bytes(request.body)
        bodies.append(path)
    methods = {request.method for request in requests_}
    if len(methods) != 1:
        raise ValueError("one method per cycle")
    script = LUA_COMMON + _fill(
        LUA_CYCLE,
        BODIES=_lua_list(bodies),
        TARGETS=_lua_list([request.target for request in requests_]),
        TYPES=_lua_list([request.content_type for request in requests_]),
        METHOD=lua_string(methods.pop()),
        BATCH=str(batch),
        OUT=lua_string(str(run / "out")),
    )
    return _run_wrk(origin, script, run, connections, seconds)


def _wrk_walk(
    origin: str, prefix: str, seconds: float, workdir: Path, tag_bytes: int, tail: bytes
) -> Outcome:
    run = workdir / f"wrk-{next(_counter)}"
    run.mkdir(parents=True)
    script = LUA_COMMON + _fill(
        LUA_WALK,
        PREFIX=lua_string(prefix),
        TAG_BYTES=str(tag_bytes),
        TAIL=lua_string(tail),
        OUT=lua_string(str(run / "out")),
    )
    outcome = _run_wrk(origin, script, run, 1, seconds)
    for line in (run / "out.names").read_text().splitlines():
        name, tag = line.split("\t")
        outcome.names.append(name)
        outcome.tags.append(tag)
    return outcome


def _run_wrk(origin: str, script: str, run: Path, connections: int, seconds: float) -> Outcome:
    (run / "script.lua").write_text(script)
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        f"{TIMEOUT}s",
        "-s",
        str(run / "script.lua"),
        origin + "/",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    found = re.search(r"BENCH-RESULT (\{.*\})", result.stdout)
    if result.returncode != 0 or not found:
        raise RuntimeError(
            f"wrk failed ({result.returncode}): {result.stdout[-500:]}{result.stderr[-500:]}"
        )
    figures = json.loads(found.group(1))
    return Outcome(
        sent=figures["sent"],
        acked=figures["acked"],
        bad=figures["bad"],
        refused=figures["refused"],
        socket_errors=figures["socket_errors"],
        seconds=figures["seconds"],
        wraps=figures["wraps"],
        first_bad=(run / "out.bad").read_bytes().decode(errors="replace"),
    )


# ---- Python fallback ------------------------------------------------------------------


class _Counts:
    """The cycle's counters, shared by the client threads."""

    def __init__(self) -> None:
        self.outcome, self.lock = Outcome(), threading.Lock()

    def add(self, ok: bool, status: int, body: bytes) -> None:
        with self.lock:
            if ok:
                self.outcome.acked += 1
            else:
                _note_bad(self.outcome, status, body)


def _python_cycle(
    origin: str, requests_: list[Request], connections: int, seconds: float, batch: int
) -> Outcome:
    counts, sessions = _Counts(), []

    def factory(number: int) -> Operation:
        session = requests.Session()
        sessions.append(session)
        turns = itertools.islice(itertools.cycle(requests_), number, None)

        def send() -> None:
            request = next(turns)
            headers = {"Content-Type": request.content_type} if request.content_type else {}
            with counts.lock:
                counts.outcome.sent += 1
            reply = session.request(
                request.method,
                origin + request.target,
                data=request.body or None,
                headers=headers,
                timeout=TIMEOUT,
            )
            ok = reply.status_code == 200 and OK in reply.content
            counts.add(
                ok and (not batch or batch_reply_ok(reply.content, batch)),
                reply.status_code,
                reply.content,
            )

        return send

    try:
        counts.outcome.seconds = run_clients(connections, factory, seconds=seconds).seconds
    finally:
        for session in sessions:
            session.close()
    return counts.outcome


def _python_walk(origin: str, prefix: str, seconds: float, tag_bytes: int, tail: bytes) -> Outcome:
    outcome, pointer = Outcome(), [""]

    with requests.Session() as session:

        def factory(number: int) -> Operation:
            def fetch() -> None:
                outcome.sent += 1
                reply = session.get(origin + prefix + pointer[0], timeout=TIMEOUT)
                found = DISPOSITION.search(reply.headers.get("Content-Disposition", ""))
                body = reply.content
                if reply.status_code == 200 and found:
                    pointer[0] = found.group(1)
                    outcome.acked += 1
                    outcome.names.append(pointer[0])
                    outcome.tags.append(body[:tag_bytes].decode(errors="replace"))
                    if body[tag_bytes:] != tail:
                        _note_bad(outcome, 200, f"body of {pointer[0]} differs".encode())
                elif reply.status_code == 200 and OK in body:
                    outcome.wraps += 1
                    pointer[0] = ""
                else:
                    _note_bad(outcome, reply.status_code, body)

            return fetch

        outcome.seconds = run_clients(1, factory, seconds=seconds).seconds
    return outcome


def _note_bad(outcome: Outcome, status: int, body: bytes) -> None:
    if status == 503:
        outcome.refused += 1
        return
    outcome.bad += 1
    outcome.first_bad = outcome.first_bad or f"{status} {body[:300]!r}"
