"""The ingress under careless and hostile clients: headers trickled byte by byte, more idle
connections than the cap, a process short of file descriptors, and every connection busy."""
import json
import resource
import socket
import subprocess
import threading
import time

from conftest import ARBITER_BIN, start_server
from arbiter_testing import Server, read_listening_line, source_toml


def _open(server, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection((server.host, server.port), timeout=5)
        socks.append(s)
    return socks


def _closed_by_peer(sock, wait):
    """True when the server closes `sock` within `wait` seconds."""
    sock.settimeout(wait)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _timed_health(server):
    start = time.monotonic()
    status, _, _ = server.request("GET", "/health")
    return status, time.monotonic() - start


def test_headers_trickled_byte_by_byte_are_cut_off_at_read_timeout(make_server):
    s = make_server("[server]\nread_timeout_ms = 1000\nidle_timeout_ms = 60000\n")
    slow = socket.create_connection((s.host, s.port), timeout=5)
    idle = socket.create_connection((s.host, s.port), timeout=5)
    start = time.monotonic()
    closed_at = None
    for byte in b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n":
        try:
            slow.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - start
            break
        if _closed_by_peer(slow, 0.2):
            closed_at = time.monotonic() - start
            break
        if time.monotonic() - start > 5:
            break
    assert closed_at is not None, "a connection trickling its headers was never cut off"
    assert 0.9 <= closed_at <= 2.5, closed_at
    # A connection that has sent nothing is idle, not slow: it waits for idle_timeout_ms.
    assert not _closed_by_peer(idle, 0.1)
    status, _, body = s.request("GET", "/metrics")
    assert status == 200
    assert 'arbiter_rejections_total{reason="read_timeout"} 1' in body
    assert s.request("GET", "/health")[0] == 200


def test_beyond_max_connections_the_oldest_idle_connection_makes_room(make_server):
    s = make_server("[server]\nmax_connections = 20\n")
    idle = _open(s, 50)
    status, took = _timed_health(s)
    assert status == 200 and took < 1.0, took
    # The first ones were closed to make room for the later ones; the latest still stand.
    assert _closed_by_peer(idle[0], 2.0)
    assert not _closed_by_peer(idle[-1], 0.1)
    status, _, body = s.request("GET", "/metrics")
    open_now = [line for line in body.splitlines() if line.startswith("arbiter_http_connections ")]
    assert open_now and float(open_now[0].split()[1]) <= 21, open_now
    for sock in idle:
        sock.close()


def test_connections_still_sending_headers_make_room_too(make_server):
    # helper-48: a connection that had sent part of a request line was chosen to make room,
    # left open, and no longer tracked: 20 of them stood beside a cap of 8.
    s = make_server("[server]\nmax_connections = 8\nread_timeout_ms = 30000\n")
    partial = _open(s, 20)
    for sock in partial:
        sock.sendall(b"POST /v1/score HTTP/1.1\r\n")
        time.sleep(0.01)  # each is older than the next
    status, took = _timed_health(s)
    assert status == 200 and took < 1.0, took
    assert _closed_by_peer(partial[0], 2.0)
    assert not _closed_by_peer(partial[-1], 0.1)
    status, _, body = s.request("GET", "/metrics")
    open_now = [line for line in body.splitlines() if line.startswith("arbiter_http_connections ")]
    assert open_now and float(open_now[0].split()[1]) <= 9, open_now
    for sock in partial:
        sock.close()


def raw_exchange(s, request):
    """Sends `request` on a new connection; returns all it got before the server closed."""
    sock = socket.create_connection((s.host, s.port), timeout=5)
    sock.sendall(request)
    answer = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        answer += chunk
    sock.close()
    return answer


def test_a_body_whose_length_is_unknown_is_refused_and_not_read_as_a_request(make_server):
    # helper-48: with a Transfer-Encoding not ending in chunked the body was read as empty and
    # then served as the next request on the connection (request smuggling behind a proxy).
    s = make_server()
    for coding in ("gzip", "identity", "chunked, chunked"):
        smuggled = b"GET /v1/steps/SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n"
        answer = raw_exchange(s, b"POST /v1/score HTTP/1.1\r\nHost: x\r\n"
                              b"Content-Type: application/json\r\n"
                              + b"Transfer-Encoding: " + coding.encode() + b"\r\n\r\n"
                              + smuggled)
        assert answer.startswith(b"HTTP/1.1 400"), (coding, answer)
        assert b"Transfer-Encoding" in answer and answer.count(b"HTTP/1.1") == 1, (coding, answer)
    # A chunked body is fine; a hang-up in the middle of one is not a malformed request.
    status, _, _ = s.request("GET", "/health")
    assert status == 200
    before = s.request("GET", "/metrics")[2]
    sock = socket.create_connection((s.host, s.port), timeout=5)
    sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"it")
    sock.close()
    time.sleep(0.3)
    after = s.request("GET", "/metrics")[2]
    malformed = [line for line in after.splitlines()
                 if line.startswith('arbiter_rejections_total{reason="malformed_http"}')]
    assert malformed == [line for line in before.splitlines()
                         if line.startswith('arbiter_rejections_total{reason="malformed_http"}')]


def test_an_http11_request_needs_exactly_one_host(make_server):
    # RFC 9112 §3.2 (helper-48, left at stop 54): a proxy and this server could each route
    # a request without Host, or with two, by a different one.
    s = make_server()
    answer = raw_exchange(s, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and b"needs a Host header" in answer, answer
    answer = raw_exchange(s, b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and b"Host given twice" in answer, answer
    assert answer.count(b"HTTP/1.1") == 1, answer  # and the connection closed
    answer = raw_exchange(s, b"GET /health HTTP/1.0\r\n\r\n")  # 1.0 has no Host rule
    assert answer.startswith(b"HTTP/1.0 200"), answer
    answer = raw_exchange(s, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_every_connection_busy_answers_the_newcomer_503(make_server, provider):
    slow = provider("--latency-median-ms", "2500", "--latency-p99-ms", "2600")
    s = make_server("[server]\nmax_connections = 2\n",
                    env={"LLM_JUDGE_SERVER_URL": slow.url, "LLM_JUDGE_MODEL": "m"})
    def judge(k):
        # Distinct items, so that the two calls are not coalesced into one.
        return {"items": [{"reward": "judge", "solution_str": f"{k}", "ground_truth": "4",
                           "extra_info": {"problem": "2 + 2?"}}], "deadline_ms": 20000}
    results = []

    def busy(k):
        results.append(s.score(judge(k))[0])

    threads = [threading.Thread(target=busy, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    # Both requests are in flight once the provider holds both calls.
    give_up = time.monotonic() + 5
    while slow.stats()["in_flight"] < 2:
        assert time.monotonic() < give_up, slow.stats()
        time.sleep(0.02)
    status, headers, body = s.score(judge(2))
    assert status == 503, body
    assert body["error"]["code"] == "server_busy"
    assert "server.max_connections" in body["error"]["message"]
    assert headers["retry-after"] == "1"
    # A readiness probe and a scrape are answered even so (they were 503 server_busy too).
    status, _, health = s.request("GET", "/health")
    assert (status, health) == (200, {"status": "ok"})
    status, _, metrics = s.request("GET", "/metrics")
    assert status == 200 and "arbiter_http_connections" in metrics
    for t in threads:
        t.join()
    assert results == [200, 200], "the connections in flight are answered"
    assert s.score(judge(3))[0] == 200, "room again once they are"


def test_short_of_file_descriptors_health_answers_and_the_log_stays_quiet(tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    log = open(tmp_path / "stderr.log", "w+")
    env = {"ARBITER_DEFAULT_EMBEDDER_DIR": "", "ARBITER_NVML_LIBRARY": "/nonexistent",
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([ARBITER_BIN, "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=log, env=env, text=True, preexec_fn=limit)
    try:
        _, host, port = read_listening_line(proc)
        s = Server(proc, host, port)
        socks = _open(s, 400)
        time.sleep(1.0)
        status, took = _timed_health(s)
        assert status == 200 and took < 1.0, took
        for sock in socks:
            sock.close()
        assert s.stop() == 0
        log.seek(0)
        lines = log.read().splitlines()
        assert any("server.max_connections lowered from 4096 to 128" in l for l in lines), lines
        assert len([l for l in lines if "accept failed" in l]) <= 3, lines[-10:]
        assert len(lines) < 20, lines[-10:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_a_key_given_twice_is_refused_naming_it(server):
    item = '{"reward": "lexical", "solution_str": "a", "ground_truth": "a"}'
    items = "[" + ",".join([item] * 8) + "]"
    body = '{"items": ' + items + ', "items": ' + items + "}"
    status, _, reply = server.request("POST", "/v1/score", body,
                                      {"Content-Type": "application/json"})
    assert status == 400, reply
    assert reply["error"]["message"] == "items: given twice"
    status, _, reply = server.request("POST", "/remote_rm?reward=lexical",
                                      '{"query": ["a"], "query": ["b"]}')
    assert status == 400 and "query: given twice" in str(reply), reply
    assert server.score({"items": [{"reward": "lexical", "solution_str": "a",
                                    "ground_truth": "a"}]})[0] == 200


def test_an_object_of_many_keys_is_read_in_linear_time(server):
    """An item, or its extra_info, of 400,000 keys (5 MB) is read at once: keys were checked
    for repeats each against each, which held an I/O thread 6 s for 100,000 and would have
    for minutes at the body limit. The bound is 20 times what it takes on a slow machine."""
    keys = ", ".join(f'"k{i}": 1' for i in range(400_000))
    head = '{"items": [{"reward": "exact_match", "solution_str": "x", "ground_truth": "x", '
    for body in (head + keys + "}]}", head + '"extra_info": {' + keys + "}}]}"):
        started = time.time()
        status, _, reply = server.request("POST", "/v1/score", body)
        assert status == 200 and reply["scores"] == [1.0], reply
        assert time.time() - started < 20
    twice = head + '"extra_info": {' + keys + ', "k7": 2}}]}'
    status, _, reply = server.request("POST", "/v1/score", twice)
    assert status == 400 and reply["error"]["field"] == "items[0].extra_info.k7", reply


def test_a_provider_that_echoes_the_key_never_gets_it_past_arbiter(tmp_path, provider):
    """The provider answers 401 quoting the Authorization header Arbiter sent, as some do.
    Neither the key nor a recognisable piece of it reaches an item's error, /info, the trainer
    routes' errors or the server's log; the reason (401, incorrect key) still does."""
    import json
    from arbiter_testing import source_toml
    keys = {"openai": "sk-proj-Zq8vYp4LmN2xR7tK9wB3cD5fG1hJ6",
            "hex": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c"}
    for kind, key in keys.items():
        p = provider("--api-key", "the-right-one", "--echo-key")
        log_path = tmp_path / f"arbiter-{kind}.log"
        with open(log_path, "w") as log:
            s = start_server(tmp_path, "[routing]\ncache_capacity = 0\n\n"
                             + source_toml("locked", p.url, api_key=key), stderr=log)
            try:
                status, _, body = s.score({"items": [{
                    "reward": "judge", "solution_str": "4", "ground_truth": "4",
                    "extra_info": {"problem": "2 + 2?"}}]})
                assert status == 200
                r = body["results"][0]
                assert r["status"] == "failed" and r["error"]["code"] == "upstream_rejected", r
                assert "401" in r["error"]["message"], r
                assert "incorrect API key provided: Bearer [redacted]" in r["error"]["message"]
                status, _, rm = s.request("POST", "/remote_rm?reward=judge",
                                          {"prompt": "2 + 2?", "response": "4", "label": "4"})
                assert status in (422, 503), rm  # 503 once the 401 ejected the source
                status, _, info = s.request("GET", "/info")
                seen = json.dumps(body) + json.dumps(rm) + json.dumps(info)
            finally:
                s.stop()
        seen += log_path.read_text()
        for piece in (key, key[:16], key[-16:]):
            assert piece not in seen, (kind, piece)
        assert "[redacted]" in seen


def _rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def test_memory_a_burst_took_is_given_back_once_requests_stop(make_server):
    """server.return_memory: a burst of large requests grows the heap; a couple of seconds
    after the last reply most of it is back with the OS (glibc alone keeps all of it;
    bench/memory_bench.py measures both)."""
    import json
    import os
    import pytest
    if "ASAN_OPTIONS" in os.environ:
        pytest.skip("AddressSanitizer's allocator holds freed memory in its quarantine; the "
                    "plain build is the one that returns it")
    import random
    from concurrent.futures import ThreadPoolExecutor
    rng = random.Random(2)

    def text():
        return " ".join("".join(rng.choice("abcdefgh") for _ in range(6)) for _ in range(20))

    bodies = [json.dumps({"items": [{"reward": "lexical", "solution_str": text(),
                                     "ground_truth": text()} for _ in range(8192)]})
              for _ in range(6)]
    s = make_server()
    for _ in range(20):
        s.score({"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": "a"}]})
    time.sleep(2.5)
    warm = _rss_mb(s.proc.pid)
    peak = [warm]
    sampling = threading.Event()

    def sample():  # the peak between replies too, on a slow or busy machine
        while not sampling.is_set():
            peak[0] = max(peak[0], _rss_mb(s.proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            for status in pool.map(lambda b: s.request("POST", "/v1/score", b)[0], bodies):
                assert status == 200
    finally:
        sampling.set()
        sampler.join()
    peak = max(peak[0], _rss_mb(s.proc.pid))
    assert peak - warm > 30, f"the burst should grow the heap ({warm:.0f} -> {peak:.0f} MB)"
    # Trimming starts about two seconds after the last reply; a loaded machine may take longer.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.5)
        kept = (_rss_mb(s.proc.pid) - warm) / (peak - warm)
        if kept < 0.5:
            break
    assert kept < 0.5, f"{kept:.0%} of the burst's {peak - warm:.0f} MB is still held"


def _judge_items(n):
    return [{"reward": "judge", "solution_str": f"answer {k}", "ground_truth": "4",
             "extra_info": {"problem": "2 + 2?"}} for k in range(n)]


def _send_unanswered(server, provider, items):
    """Sends `items` in one /v1/score request on a connection of its own, once the provider
    holds the first of its calls; returns the connection, its answer unread."""
    body = json.dumps({"items": items, "deadline_ms": 60000}).encode()
    conn = socket.create_connection((server.host, server.port), timeout=5)
    conn.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    _wait_for("the provider's first call", lambda: provider.stats()["in_flight"] >= 1)
    return conn


def _send_and_hang_up(server, provider, items):
    """Sends `items` and closes the connection without reading the answer once the provider
    holds the first of its calls (a trainer's timeout)."""
    _send_unanswered(server, provider, items).close()


def _wait_for(what, condition, within=5.0):
    give_up = time.monotonic() + within
    while not condition():
        assert time.monotonic() < give_up, f"waited {within} s for {what}"
        time.sleep(0.02)


def _metric(server, name):
    """The value of the metric line that starts with `name` (labels included); 0 if absent."""
    _, _, text = server.request("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _settled(provider):
    """The provider's stats once no call is in flight (it counts a call when it answers it,
    one nobody awaits too)."""
    give_up = time.monotonic() + 10
    while (stats := provider.stats())["in_flight"] > 0:
        assert time.monotonic() < give_up, stats
        time.sleep(0.05)
    return stats


def test_a_client_that_hangs_up_stops_its_calls_and_others_are_unharmed(make_server, provider):
    # A trainer whose reward timeout fires closes its connection; the 40 judge calls it asked
    # for must not all go to the provider anyway (they cost money and hold the provider's
    # limit from the next request). One call at a time, 300 ms each.
    slow = provider("--latency-median-ms", "300", "--latency-p99-ms", "320")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\n\n"
                    + source_toml("judge", slow.url, max_concurrency=1, initial_concurrency=1))
    items = _judge_items(40)
    _send_and_hang_up(s, slow, items)
    # Another client's request, sent after, is answered in full.
    status, _, answer = s.score({"items": items[:2], "deadline_ms": 20000})
    assert status == 200 and [r["status"] for r in answer["results"]] == ["ok", "ok"], answer
    calls = _settled(slow)["requests_total"]
    # The calls made before the news arrived (the watch starts after 50 ms, later on a slow,
    # sanitized build: one to three here), plus the other client's two; not 42.
    assert calls <= 10, slow.stats()
    _, _, metrics = s.request("GET", "/metrics")
    assert "arbiter_abandoned_requests_total 1" in metrics, metrics
    failed = [line for line in metrics.splitlines()
              if line.startswith('arbiter_item_failures_total{reason="client_closed"}')]
    # The judge's 40 items, and the model calls the ones underway had asked for.
    assert failed and float(failed[0].split()[1]) >= 40, failed
    time.sleep(0.5)
    assert slow.stats()["requests_total"] == calls, "nothing was sent later either"


def test_a_client_that_hangs_up_and_sends_again_gets_its_place_back(make_server, provider):
    # A client whose own timeout fired sends the same items again (the Python client does).
    # Its calls were dropped at the hang-up, but it must not land behind work that arrived
    # while it waited: the retry goes where the dropped calls were. One call at a time, 100 ms
    # each; each judge item is one call.
    slow = provider("--latency-median-ms", "100", "--latency-p99-ms", "110")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\n\n"
                    + source_toml("judge", slow.url, max_concurrency=1, initial_concurrency=1))
    depth = 'arbiter_queue_depth{priority="normal"}'
    mine = _judge_items(10)
    theirs = [dict(item, solution_str="their " + item["solution_str"]) for item in mine]
    first = _send_unanswered(s, slow, mine)  # 1 call out, 9 queued
    done = {}

    def score(name, items):
        status, _, answer = s.score({"items": items, "deadline_ms": 30000})
        done[name] = (time.monotonic(), status, {r["status"] for r in answer["results"]})

    other = threading.Thread(target=score, args=("theirs", theirs))
    other.start()
    # Their 10 calls queue behind mine (a few of mine may have gone meanwhile).
    _wait_for("their calls queued", lambda: _metric(s, depth) >= 14)
    first.close()  # my timeout
    _wait_for("my calls dropped", lambda: _metric(s, "arbiter_abandoned_requests_total") == 1
              and _metric(s, depth) <= 10)
    score("mine, again", mine)
    other.join()
    for name, (_, status, statuses) in done.items():
        assert status == 200 and statuses == {"ok"}, (name, status, statuses)
    assert done["mine, again"][0] < done["theirs"][0], done
    assert _metric(s, "arbiter_abandoned_requests_total") == 1


def test_a_trainer_that_hangs_up_while_its_refusal_is_held_is_not_sent_again(make_server,
                                                                            provider):
    # /get_reward holds a refused sample for its Retry-After and then sends it to the
    # scheduler again (OpenRLHF and slime ignore Retry-After). Its client hanging up ends the
    # hold at once: the sample is not sent again for nobody. A class that holds two queued
    # items, one call at a time, 1 s a call.
    slow = provider("--latency-median-ms", "1000", "--latency-p99-ms", "1020")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    '[[scheduler.priorities]]\nname = "normal"\ncapacity = 2\n\n'
                    + source_toml("judge", slow.url, max_concurrency=1, initial_concurrency=1))
    running = _send_unanswered(s, slow, _judge_items(1))
    queued = socket.create_connection((s.host, s.port), timeout=5)
    body = json.dumps({"items": _judge_items(2), "deadline_ms": 60000}).encode()
    queued.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    _wait_for("the class full", lambda: _metric(s, 'arbiter_queue_depth{priority="normal"}') >= 2)
    sample = json.dumps({"query": ["2 + 2? 4"], "prompts": ["2 + 2? "], "labels": ["4"]}).encode()
    trainer = socket.create_connection((s.host, s.port), timeout=5)
    trainer.sendall(b"POST /get_reward?reward=judge HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: "
                    + str(len(sample)).encode() + b"\r\n\r\n" + sample)
    _wait_for("the sample refused (the class is full) and held",
              lambda: _metric(s, "arbiter_held_requests") == 1)
    trainer.close()
    answered = 'arbiter_held_refusals_total{outcome="answered"}'
    _wait_for("the hold ended by the hang-up", lambda: _metric(s, answered) == 1)
    assert _metric(s, "arbiter_abandoned_requests_total") == 1
    # Answered, it is held no more and can never be sent again.
    assert _metric(s, "arbiter_held_requests") == 0
    assert _metric(s, 'arbiter_held_refusals_total{outcome="sent_again"}') == 0
    assert _metric(s, answered) == 1
    running.close()
    queued.close()


def test_a_pipelined_request_is_not_taken_for_a_hang_up(make_server, provider):
    # The next request's bytes arriving while the first is scored make the socket readable
    # too: both are answered, in order, and nothing is abandoned.
    slow = provider("--latency-median-ms", "200", "--latency-p99-ms", "220")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\n\n"
                    + source_toml("judge", slow.url))
    conn = socket.create_connection((s.host, s.port), timeout=10)
    wire = b""
    for k in range(2):
        body = json.dumps({"items": [{"reward": "judge", "solution_str": f"pipelined {k}",
                                      "ground_truth": "4", "extra_info": {"problem": "2+2?"}}]})
        wire += (b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body.encode())
    conn.sendall(wire[:len(wire) // 2])
    time.sleep(0.05)
    conn.sendall(wire[len(wire) // 2:])
    replies = b""
    while replies.count(b"HTTP/1.1 200") < 2:
        chunk = conn.recv(65536)
        assert chunk, replies
        replies += chunk
    assert replies.count(b'"status":"ok"') == 2, replies
    conn.close()
    _, _, metrics = s.request("GET", "/metrics")
    assert "arbiter_abandoned_requests_total 0" in metrics


def test_with_abandon_on_hang_up_off_a_request_runs_to_the_end(make_server, provider):
    slow = provider("--latency-median-ms", "100", "--latency-p99-ms", "110")
    s = make_server("[server]\nabandon_on_hang_up = false\n\n"
                    "[routing]\nhedge = false\ncache_capacity = 0\n\n"
                    + source_toml("judge", slow.url, max_concurrency=1, initial_concurrency=1))
    _send_and_hang_up(s, slow, _judge_items(6))
    give_up = time.monotonic() + 10
    while slow.stats()["requests_total"] < 6:
        assert time.monotonic() < give_up, slow.stats()
        time.sleep(0.05)
    _, _, metrics = s.request("GET", "/metrics")
    assert "arbiter_abandoned_requests_total 0" in metrics
    assert 'reason="client_closed"' not in metrics
