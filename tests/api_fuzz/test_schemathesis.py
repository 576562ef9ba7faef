"""schemathesis against the api's own OpenAPI document, the app in-process (WSGI).

Bounded: at most MAX_EXAMPLES generated cases per operation, plus the examples and
coverage phases schemathesis adds. Every reply must be documented (status, content
type, headers, body schema), and no reply may be a 5xx other than the documented
transient 503 and 507. Afterwards the data dir must hold only the protocol's layout,
no upload left behind, and nothing may have been written beside it.

``-s`` prints how many requests were made.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from tests.api_fuzz.helpers import OPENAPI_PATH, make_app
from zoscii_api.context import KEY as CONTEXT
from zoscii_api.settings import ACTIONS
from zosciimq.core import DataDir, DataStore, QueueStore, Upload, parse_name
from zosciimq.protocol import FRAME_END, FRAMED_BATCH

pytestmark = pytest.mark.slow  # about a minute

MAX_EXAMPLES = 150
TRANSIENT_5XX = frozenset({503, 507})
SEED_QUEUE = "fuzzq"
SEEDED_STORE = (
    "202601020304050000-0007-0b1e6a52-9c1f-4c43-a1f4-3d1e52b7c001.bin",
    "202601020304050000-0007-0b1e6a52-9c1f-4c43-a1f4-3d1e52b7c002-u.bin",
    "203001020304050000-0000-0b1e6a52-9c1f-4c43-a1f4-3d1e52b7c003-u.bin",
)
POINTERS = (  # before every seeded message, and after them all
    "200001010000000000-0000-00000000-0000-4000-8000-000000000000.bin",
    "299912312359599999-9999-ffffffff-ffff-4fff-bfff-ffffffffffff.bin",
)
LAYOUT = frozenset({"queues", "store", "nonce", "states", ".zoscii"})


class CountingApp:
    """WSGI middleware counting every request the fuzzer makes, by status."""

    def __init__(self, app: Callable) -> None:
        self.app = app
        self.statuses: Counter[int] = Counter()
        self.actions: Counter[tuple[str, int]] = Counter()

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        # schemathesis' WSGI transport leaves the peer out; a server always sets it. A
        # loopback peer, as in the container's own health checks, may use the api's port.
        environ.setdefault("REMOTE_ADDR", "127.0.0.1")

        def counting_start_response(status: str, headers: list, *args: Any) -> Callable:
            code = int(status.split()[0])
            self.statuses[code] += 1
            context = environ.get(CONTEXT)
            self.actions[context.action if context else environ["PATH_INFO"], code] += 1
            return start_response(status, headers, *args)

        return self.app(environ, counting_start_response)

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())


@dataclass
class FuzzRun:
    parent: Path
    data_dir: Path
    app: CountingApp
    outside_before: dict[str, tuple[int, int]] = field(default_factory=dict)
    cases: int = 0


def snapshot_outside(parent: Path, data_dir: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``parent`` but outside ``data_dir``: (size, mtime_ns)."""
    found = {}
    for root, dirs, files in os.walk(parent):
        here = Path(root)
        if here == data_dir:
            dirs.clear()
            continue
        for name in dirs + files:
            path = here / name
            if path == data_dir:
                continue
            stat = path.lstat()
            found[str(path.relative_to(parent))] = (stat.st_size, stat.st_mtime_ns)
    return found


def seed(data_dir: Path) -> None:
    """A queue with messages and store entries with known names, for the aimed cases."""
    layout = DataDir(data_dir)
    queues, store = QueueStore(layout), DataStore(layout)
    for retention, body in enumerate(
        [b"first", b'{"system": "not an envelope"}', bytes(range(256))]
    ):
        upload = Upload(layout)
        upload.write(body)
        queues.publish(SEED_QUEUE, upload, retention_days=retention)
    for name in SEEDED_STORE:
        upload = Upload(layout)
        upload.write(b"stored " * 10)
        assert store.put(upload, parse_name(name))


@pytest.fixture(scope="module")
def fuzz_run() -> Iterator[FuzzRun]:
    parent = Path(tempfile.mkdtemp(prefix="zoscii-fuzz-"))
    data_dir = parent / "data"
    (parent / "sibling.txt").write_text("must stay as it is\n")
    app = CountingApp(make_app(data_dir))
    seed(data_dir)
    run = FuzzRun(parent=parent, data_dir=data_dir, app=app)
    run.outside_before = snapshot_outside(parent, data_dir)
    yield run
    shutil.rmtree(parent, ignore_errors=True)


def _framed_bodies() -> st.SearchStrategy[bytes]:
    """Framed batch bodies (PROTOCOL.md "Framed batch"): whole, cut short anywhere, or
    noise. Without a strategy for its media type schemathesis skips the framed body."""
    options = st.sampled_from([b"", b" n=fz-1", b" r=7&ttl=60", b" n=no%20space", b" x=1"])
    frames = st.lists(st.tuples(st.binary(max_size=64), options), max_size=4)
    whole = frames.map(
        lambda fs: b"".join(b"%d%s\n%s" % (len(data), o, data) for data, o in fs) + FRAME_END
    )
    cut = whole.flatmap(lambda body: st.integers(0, len(body)).map(lambda n: body[:n]))
    return st.one_of(whole, cut, st.binary(max_size=100))


schemathesis.openapi.media_type(FRAMED_BATCH, _framed_bodies())

# Positive and negative cases: invalid input must get a documented 4xx envelope too.
schema = schemathesis.openapi.from_path(
    OPENAPI_PATH, config=SchemathesisConfig.from_dict({"generation": {"mode": "all"}})
)
ENDPOINT = r"^/(index\.php)?$"

# Aim most generated cases at what exists: an action with the parameters it needs, and
# q, after, name and names pointing at the seeded queue and names. The rest stay as
# generated (the coverage and examples phases are never aimed).
NEEDS = {"publish": ("q", "msg"), "fetch": ("q",), "store": ("msg",), "retrieve": ("name",)}
NEEDS["identify"] = ("names",)
_AIMS = st.fixed_dictionaries(
    {
        "action": st.sampled_from(ACTIONS),
        "q": st.sampled_from([SEED_QUEUE, SEED_QUEUE.upper()]),
        "msg": st.binary(max_size=64).map(lambda raw: raw.decode("latin-1")),
        "after": st.sampled_from(["", *POINTERS]),
        "name": st.sampled_from(SEEDED_STORE),
        "names": st.lists(st.sampled_from(SEEDED_STORE), max_size=3).map(json.dumps),
    }
)


@schema.hook
def flatmap_case(context: Any, case: Any) -> st.SearchStrategy:
    return st.sampled_from([True, True, True, False]).flatmap(
        lambda aimed: _AIMS.map(lambda aim: _aim(case, aim)) if aimed else st.just(case)
    )


def _aim(case: Any, aim: dict[str, str]) -> Any:
    if case.query is None:
        case.query = {}
    form = case.body if isinstance(case.body, dict) else None
    params = form if form is not None else case.query  # a form value wins over the query's
    action = params.get("action") or case.query.get("action") or aim["action"]
    params["action"] = action
    for key in NEEDS.get(action, ()):
        if key not in params and key not in case.query:
            params[key] = aim[key]
    for container in (case.query, form or {}):
        for key in ("q", "after", "name", "names"):
            if key in container:
                container[key] = aim[key]
    return case


def no_undocumented_server_error(ctx: Any, response: Any, case: Any) -> None:
    """500 is documented (an unexpected error) but is always a bug; 503/507 are transient."""
    status = response.status_code
    assert status < 500 or status in TRANSIENT_5XX, f"server error {status}: {response.text[:300]}"


CHECKS = [
    no_undocumented_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    unsupported_method,
    allow_header_conformance,
]


SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
    "database": None,
}


@schema.include(path_regex=ENDPOINT).parametrize()
@settings(max_examples=MAX_EXAMPLES, **SETTINGS)
def test_endpoint_conforms_to_its_document(case: Any, fuzz_run: FuzzRun) -> None:
    fuzz_run.cases += 1
    case.call_and_validate(checks=CHECKS, app=fuzz_run.app)


@schema.exclude(path_regex=ENDPOINT).parametrize()
@settings(max_examples=5, **SETTINGS)  # no parameters: a few requests say it all
def test_operations_routes_conform_to_the_document(case: Any, fuzz_run: FuzzRun) -> None:
    fuzz_run.cases += 1
    case.call_and_validate(checks=CHECKS, app=fuzz_run.app)


def test_fuzzing_stayed_inside_the_data_dir(fuzz_run: FuzzRun) -> None:
    if fuzz_run.app.requests == 0:
        pytest.skip("runs after the tests above (run the whole module)")
    print(
        f"\nschemathesis: {fuzz_run.cases} cases, {fuzz_run.app.requests} requests, "
        f"statuses {dict(sorted(fuzz_run.app.statuses.items()))}"
    )
    print("by action and status:", dict(sorted(fuzz_run.app.actions.items())))
    reached = {action for action, _status in fuzz_run.app.actions}
    assert reached >= set(ACTIONS), "the aiming hook no longer reaches every action"
    assert snapshot_outside(fuzz_run.parent, fuzz_run.data_dir) == fuzz_run.outside_before
    data_dir = fuzz_run.data_dir
    assert {p.name for p in data_dir.iterdir()} <= LAYOUT
    assert list((data_dir / "queues" / "temp").iterdir()) == [], "an upload was left behind"
    for queue_dir in (data_dir / "queues").iterdir():
        if queue_dir.name != "temp":
            for path in queue_dir.iterdir():
                parse_name(path.name)
    for path in (data_dir / "store").rglob("*"):
        if path.is_file():
            assert parse_name(path.name).store_dirs == path.parent.parts[-3:]
