"""End-to-end tests of /v1/score and the other routes over real HTTP on loopback."""
import difflib
import http.client
import json
import random
import threading
import time

ISSUE_EXAMPLE = {
    "items": [
        {"reward": "lexical", "solution_str": "The answer is 4.", "ground_truth": "4"},
        {"reward": "exact_match", "solution_str": "Paris",
         "ground_truth": ["Paris", "paris, France"]},
    ],
    "priority": "high",
    "deadline_ms": 30000,
}


def ratio(a, b):
    return difflib.SequenceMatcher(None, a, b).ratio()


def ok_item(solution="a b c", truth="a b d"):
    return {"reward": "lexical", "solution_str": solution, "ground_truth": truth}


def test_mixed_batch_answers_in_order(server):
    status, headers, body = server.score(ISSUE_EXAMPLE)
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert body["scores"] == [ratio("The answer is 4.", "4"), 1.0]
    first = body["results"][0]
    assert first["status"] == "ok"
    assert first["source"] == "cpu"
    assert first["cached"] is False
    assert first["attempts"] == 1
    assert first["error"] is None
    assert first["queue_ms"] >= 0 and first["run_ms"] >= 0
    assert body["results"][1]["score"] == 1.0


def test_data_source_prefix_selects_the_reward(server):
    status, _, body = server.score({"items": [
        {"data_source": "exact_match_squad", "solution_str": "The Eiffel Tower!",
         "ground_truth": "eiffel tower"},
        {"data_source": "lexical_v1", "solution_str": "abc", "ground_truth": "abd"},
    ]})
    assert status == 200, body
    assert body["scores"] == [1.0, ratio("abc", "abd")]


def test_scores_match_python_difflib_on_varied_text(server):
    rng = random.Random(7)
    words = ["alpha", "beta", "γάμμα", "дельта", "答案", "🙂", "x" * 30, "the", "42"]
    items, expected = [], []
    for _ in range(200):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))
        refs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
                for _ in range(rng.randint(1, 3))]
        items.append({"reward": "lexical", "solution_str": a, "ground_truth": refs})
        expected.append(max(ratio(a, r) for r in refs))
    status, _, body = server.score({"items": items})
    assert status == 200
    assert body["scores"] == expected


def test_health_info_and_metrics(server):
    status, _, body = server.request("GET", "/health")
    assert (status, body) == (200, {"status": "ok"})
    status, _, info = server.request("GET", "/info")
    assert status == 200
    assert info["version"]
    assert {r["name"] for r in info["rewards"]} >= {"lexical", "exact_match"}
    assert [q["priority"] for q in info["queues"]] == ["high", "normal", "low"]
    assert info["sources"] and info["sources"][0]["capabilities"] == ["cpu"]
    assert info["replay"] == {"enabled": False}
    server.score(ISSUE_EXAMPLE)
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert 'arbiter_items_total{reward="lexical",status="ok"} 1' in text
    assert 'arbiter_http_requests_total{code="200",route="/v1/score"} 1' in text
    assert "arbiter_queue_wait_seconds_bucket" in text


def test_concurrent_keep_alive_clients_get_every_item(server):
    errors = []

    def client(seed):
        rng = random.Random(seed)
        conn = server.connection()
        try:
            for _ in range(40):
                n = rng.randint(1, 20)
                items = []
                for _ in range(n):
                    a = "".join(rng.choice("abcde ") for _ in range(rng.randint(0, 40)))
                    b = "".join(rng.choice("abcde ") for _ in range(rng.randint(1, 40)))
                    items.append(ok_item(a, b))
                status, _, body = server.score({"items": items}, conn=conn)
                if status != 200:
                    errors.append((status, body))
                    continue
                want = [ratio(i["solution_str"], i["ground_truth"]) for i in items]
                if body["scores"] != want:
                    errors.append(("mismatch", body["scores"], want))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(s,)) for s in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


BAD_REQUESTS = [
    ("malformed JSON", '{"items": [', "body"),
    ("not an object", "[1, 2]", "body"),
    ("missing items", "{}", "items"),
    ("items not a list", '{"items": 3}', "items"),
    ("empty batch", '{"items": []}', "items"),
    ("item not an object", '{"items": ["x"]}', "items[0]"),
    ("missing solution_str", '{"items": [{"reward": "lexical", "ground_truth": "a"}]}',
     "items[0].solution_str"),
    ("wrong type", '{"items": [{"reward": "lexical", "solution_str": 1, "ground_truth": "a"}]}',
     "items[0].solution_str"),
    ("missing ground_truth", '{"items": [{"reward": "lexical", "solution_str": "a"}]}',
     "items[0].ground_truth"),
    ("unknown reward", '{"items": [{"reward": "magic", "solution_str": "a", "ground_truth": "a"}]}',
     "items[0].reward"),
    ("no reward, no prefix", '{"items": [{"solution_str": "a", "ground_truth": "a"}]}',
     "items[0].reward"),
    ("unknown priority", json.dumps({"items": [ok_item()], "priority": "urgent"}), "priority"),
    ("bad deadline", json.dumps({"items": [ok_item()], "deadline_ms": -5}), "deadline_ms"),
    ("unknown field", json.dumps({"items": [ok_item()], "prio": "high"}), "prio"),
    ("boolean ground_truth",
     '{"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": true}]}',
     "items[0].ground_truth"),
    ("null in a ground_truth list",
     '{"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": ["a", null]}]}',
     "items[0].ground_truth[1]"),
    # A trailing comma in a list is the body's fault, not a missing element's (it said
    # `items[1]: expected an object`, helper-59).
    ("trailing comma in items",
     '{"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": "a"},]}', "body"),
    ("trailing comma in a list",
     '{"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": ["a",]}]}', "body"),
]

# JSON number tokens a dataset may carry as answers; Arbiter must read each one as the text
# Python's str(json.loads(token)) gives (ints with every digit, floats as repr, 1E400 as inf).
NUMBER_TOKENS = ["72", "-0", "0", "-17", "123456789012345678901234567890", "1.0", "-0.0",
                 "2.50", "100.0", "1e2", "1E400", "-1e400", "1e-400", "1e16", "1e15",
                 "1e-05", "0.0001", "0.00001", "1.5e300", "12345678901234567e0",
                 "0.30000000000000004", "0.1000000000000000055511151231257827", "5e-324",
                 "3.141592653589793238462643383279"]


def python_text(token):
    return str(json.loads(token))


def test_bad_input_gets_4xx_naming_the_field_and_harms_nothing(server):
    conn = server.connection()
    for name, body, field in BAD_REQUESTS:
        status, headers, answer = server.request("POST", "/v1/score", body, conn=conn)
        assert status == 400, name
        assert answer["error"]["field"] == field, (name, answer)
        assert answer["error"]["code"] == "invalid_request"
        assert answer["error"]["message"].startswith(field), answer
    # Invalid UTF-8 inside a string.
    raw = b'{"items": [{"reward": "lexical", "solution_str": "\xff", "ground_truth": "a"}]}'
    status, _, answer = server.request("POST", "/v1/score", raw, conn=conn)
    assert status == 400 and answer["error"]["message"] == "body: invalid UTF-8"
    # Its options are in its body: one in the URL, as the trainer routes take it, was dropped
    # unseen (helper-48). api_key is the one parameter its URL takes.
    status, _, answer = server.request("POST", "/v1/score?deadline_ms=500&priority=high",
                                       ISSUE_EXAMPLE, conn=conn)
    assert status == 400 and answer["error"]["field"] == "deadline_ms", answer
    assert "give deadline_ms there" in answer["error"]["message"], answer
    status, _, answer = server.request("POST", "/v1/score?api_key=unused", ISSUE_EXAMPLE,
                                       conn=conn)
    assert status == 200, answer
    # Wrong method and wrong path.
    status, headers, answer = server.request("GET", "/v1/score", conn=conn)
    assert status == 405 and headers["allow"] == "POST"
    status, _, answer = server.request("POST", "/v2/score", "{}", conn=conn)
    assert status == 404 and answer["error"]["code"] == "not_found"
    # The same keep-alive connection still serves good requests.
    status, _, answer = server.score(ISSUE_EXAMPLE, conn=conn)
    assert status == 200 and len(answer["scores"]) == 2
    conn.close()
    _, _, text = server.request("GET", "/metrics")
    assert f'arbiter_rejections_total{{reason="bad_request"}} {len(BAD_REQUESTS) + 2}' in text


def test_number_ground_truths_are_read_as_pythons_str_of_them(server):
    # lexical is difflib's ratio, so it is 1.0 exactly when the texts are equal, and for the
    # raw token it is the ratio of the token to the text Arbiter made of it.
    items = []
    for token in NUMBER_TOKENS:
        want = json.dumps(python_text(token))
        items.append('{"reward": "lexical", "solution_str": %s, "ground_truth": %s}'
                     % (want, token))
        items.append('{"reward": "lexical", "solution_str": %s, "ground_truth": ["x", %s ]}'
                     % (want, token))
        items.append('{"reward": "lexical", "solution_str": %s, "ground_truth": %s}'
                     % (json.dumps(token), token))
    status, _, body = server.request("POST", "/v1/score", '{"items": [%s]}' % ", ".join(items))
    assert status == 200, body
    want = []
    for token in NUMBER_TOKENS:
        want += [1.0, 1.0, ratio(token, python_text(token))]
    assert body["scores"] == want
    # The texts differ from the tokens where Python's differ (so the check above can fail).
    assert sum(token != python_text(token) for token in NUMBER_TOKENS) >= 10


def test_oversized_batches_and_bodies_get_413(make_server):
    s = make_server("[server]\nmax_batch_items = 3\nmax_body_bytes = 2048\n")
    status, _, answer = s.score({"items": [ok_item()] * 4})
    assert status == 413 and answer["error"]["field"] == "items"
    status, _, answer = s.score({"items": [ok_item("x" * 3000)]})
    assert status == 413 and answer["error"]["code"] == "payload_too_large"
    assert s.score({"items": [ok_item()] * 3})[0] == 200
    assert s.stop() == 0


def test_a_body_over_the_limit_sent_whole_still_reads_its_413(make_server):
    """A client that sends its whole body before reading, as requests and aiohttp do, reads
    the 413 and its message: the server drops the rest of the body rather than closing with
    it unread (which resets the connection and loses the answer)."""
    s = make_server("[server]\nmax_body_bytes = 2048\n")
    body = b'{"items": [{"reward": "exact_match", "solution_str": "' + b"x" * (4 << 20) + b'"}]}'
    for _ in range(5):
        conn = http.client.HTTPConnection(s.host, s.port, timeout=10)
        conn.request("POST", "/v1/score", body=body,
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        answer = json.loads(reply.read())
        conn.close()
        assert reply.status == 413
        assert answer["error"]["code"] == "payload_too_large"
        assert "server.max_body_bytes" in answer["error"]["message"]
    assert s.score({"items": [ok_item()]})[0] == 200
    assert s.stop() == 0


def test_a_failing_item_does_not_fail_the_batch(make_server):
    s = make_server("[cpu]\nmax_lexical_chars = 10\n")
    status, _, body = s.score({"items": [ok_item("short", "shore"),
                                         ok_item("far too long for the limit", "x"),
                                         {"reward": "exact_match", "solution_str": "a",
                                          "ground_truth": "A"}]})
    assert status == 200
    assert body["scores"] == [ratio("short", "shore"), None, 1.0]
    failed = body["results"][1]
    assert failed["status"] == "failed"
    assert failed["score"] is None
    assert failed["error"]["code"] == "reward_failed"
    assert "max_lexical_chars" in failed["error"]["message"]
    assert s.stop() == 0


def test_full_priority_class_answers_429_with_retry_after(make_server, provider):
    # A judge that holds its one call for 10 s keeps 4 of 5 judge items queued.
    p = provider("--latency-median-ms", "10000", "--latency-p99-ms", "10000")
    s = make_server('[[scheduler.priorities]]\nname = "normal"\ncapacity = 5\n',
                    env={"LLM_JUDGE_SERVER_URL": p.url,
                         "ARBITER_SOURCES_LLM_JUDGE_SERVER_MAX_CONCURRENCY": "1",
                         "ARBITER_SOURCES_LLM_JUDGE_SERVER_MAX_BATCH_ITEMS": "1"})
    judges = [{"reward": "judge", "solution_str": f"s{k}", "ground_truth": "g"}
              for k in range(5)]

    def hold():
        try:
            s.score({"items": judges, "deadline_ms": 60000})
        except OSError:
            pass  # the server is killed under it at the end

    held = threading.Thread(target=hold, daemon=True)
    held.start()
    deadline = time.time() + 10
    while time.time() < deadline and p.stats()["in_flight"] < 1:
        time.sleep(0.01)
    status, headers, body = s.score({"items": [ok_item()] * 2})
    assert status == 429, body
    assert int(headers["retry-after"]) >= 1
    assert body["error"]["code"] == "overloaded"
    assert "has room for 1 more items" in body["error"]["message"]
    assert s.score({"items": [ok_item()]})[0] == 200
    _, _, text = s.request("GET", "/metrics")
    assert 'arbiter_rejections_total{reason="queue_full"} 1' in text
    s.kill()


def test_a_request_larger_than_its_whole_priority_class_gets_413_not_429(make_server):
    """Six items into a class that holds five, even empty: no retry can fit it, so it is not
    answered 429 (which the clients retry) but 413 naming items."""
    s = make_server('[[scheduler.priorities]]\nname = "normal"\ncapacity = 5\n')
    status, headers, body = s.score({"items": [ok_item()] * 6})
    assert status == 413, body
    assert "retry-after" not in headers
    assert body["error"]["code"] == "payload_too_large"
    assert body["error"]["field"] == "items"
    assert "holds at most 5 items" in body["error"]["message"]
    assert s.score({"items": [ok_item()] * 5})[0] == 200
    _, _, text = s.request("GET", "/metrics")
    assert 'arbiter_rejections_total{reason="too_large"} 1' in text
    assert s.stop() == 0


def test_expect_100_continue_is_answered(server):
    import socket
    body = json.dumps({"items": [ok_item("x" * 3000, "xy")]}).encode()
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode()
                     + b"\r\n\r\n")
        interim = sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
        sock.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(payload)["scores"] == [ratio("x" * 3000, "xy")]


def _exchange(server, raw):
    """Sends `raw` (requests that end with Connection: close) on a connection of its own;
    returns every byte the server writes until it closes."""
    import socket
    answer = b""
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(raw)
        while True:
            got = sock.recv(65536)
            if not got:
                return answer
            answer += got


def test_an_absolute_target_is_served_and_the_http_layers_errors_take_the_routes_shape(
        make_server):
    # helper-48: `POST http://host/v1/score` (a request as to a proxy, which RFC 9112 says a
    # server must take) was a 404, and a body over the limit on an OpenAI or TEI route was
    # answered in Arbiter's error shape, which their clients do not read.
    s = make_server("[server]\nmax_body_bytes = 4096\n")
    body = json.dumps(ISSUE_EXAMPLE).encode()
    head = (f"POST http://{s.host}:{s.port}/v1/score HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    answer = _exchange(s, head + body)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    # The authority ends at a '?' too: the path is not taken from the query (helper-50).
    answer = _exchange(s, head.replace(f"{s.host}:{s.port}/v1/score".encode(),
                                       b"h?/v1/score") + body)
    assert answer.startswith(b"HTTP/1.1 404"), answer
    big = b'{"input": "' + b"x" * 5000 + b'"}'
    for path, keys in [("/v1/embeddings", {"message", "type", "param", "code"}),
                       ("/embed", {"error", "error_type"}), ("/v1/score", {"error"})]:
        raw = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(big)}\r\nConnection: close\r\n\r\n").encode() + big
        status_line, _, payload = _exchange(s, raw).partition(b"\r\n")
        assert status_line.startswith(b"HTTP/1.1 413"), (path, status_line)
        error = json.loads(payload.partition(b"\r\n\r\n")[2])
        shape = error["error"] if path == "/v1/embeddings" else error
        assert set(shape) == keys, (path, error)


def test_head_gets_the_headers_only_and_keeps_the_connection_in_step(server):
    """HEAD is served as GET without a body (RFC 9110): on a keep-alive connection the next
    reply must start right after the HEAD's headers, whatever the HEAD's status."""
    answer = _exchange(server, b"HEAD /health HTTP/1.1\r\nHost: t\r\n\r\n"
                               b"HEAD /v1/score HTTP/1.1\r\nHost: t\r\n\r\n"
                               b"HEAD /nowhere HTTP/1.1\r\nHost: t\r\n\r\n"
                               b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    replies = answer.split(b"\r\n\r\n")
    assert replies[0].startswith(b"HTTP/1.1 200"), answer
    assert b"Content-Length: 15" in replies[0]
    assert replies[1].startswith(b"HTTP/1.1 405"), answer
    assert replies[2].startswith(b"HTTP/1.1 404"), answer
    assert replies[3].startswith(b"HTTP/1.1 200"), answer
    assert replies[4] == b'{"status":"ok"}', answer


def test_a_compressed_transfer_coding_gets_501_naming_it(server):
    import gzip

    def chunked(coding, body):
        return (b"POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: " + coding + b"\r\nConnection: close\r\n\r\n"
                + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")

    body = json.dumps(ISSUE_EXAMPLE).encode()
    answer = _exchange(server, chunked(b"gzip, chunked", gzip.compress(body)))
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 501"), answer
    error = json.loads(payload)["error"]
    assert error["field"] == "Transfer-Encoding" and error["code"] == "not_implemented"
    # Chunked alone is read as usual.
    assert _exchange(server, chunked(b"chunked", body)).startswith(b"HTTP/1.1 200")


def test_malformed_http_gets_400_and_the_server_carries_on(server):
    import socket
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(b"NOT AN HTTP REQUEST\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"invalid_request" in answer
    status, _, body = server.score(ISSUE_EXAMPLE)
    assert status == 200 and len(body["scores"]) == 2


def test_groups_report_their_statistics_across_requests(server):
    """A GRPO group's members, sent as the trainer sends them (here: two requests, the second
    with one member per item and the request's group_id), come back with the group's mean,
    Bessel-corrected std and zero_std flag over every member scored so far."""
    group = "uid-%d" % random.randrange(1 << 30)
    flat = "flat-%d" % random.randrange(1 << 30)
    first = {"items": [
        {"reward": "exact_match", "solution_str": "4", "ground_truth": "4", "group": group},
        {"reward": "exact_match", "solution_str": "5", "ground_truth": "4", "group": group},
        {"reward": "exact_match", "solution_str": "x", "ground_truth": "x", "group": flat},
        {"reward": "exact_match", "solution_str": "x", "ground_truth": "x", "group": flat},
        {"reward": "exact_match", "solution_str": "x", "ground_truth": "x"},
    ]}
    status, _, body = server.score(first)
    assert status == 200, body
    assert body["scores"] == [1.0, 0.0, 1.0, 1.0, 1.0]
    assert body["groups"][group] == {"scored": 2, "failed": 0, "pending": 0, "mean": 0.5,
                                     "std": 0.7071067811865476, "zero_std": False}
    assert body["groups"][flat]["zero_std"] is True
    assert body["groups"][flat]["std"] == 0.0
    assert len(body["groups"]) == 2

    status, _, body = server.score({"group_id": group, "items": [
        {"reward": "exact_match", "solution_str": "4", "ground_truth": "4"}]})
    assert status == 200, body
    stats = body["groups"][group]
    assert stats["scored"] == 3
    assert abs(stats["mean"] - 2 / 3) < 1e-12
    assert abs(stats["std"] - (1 / 3) ** 0.5) < 1e-12

    status, _, body = server.score({"items": [ok_item()]})
    assert "groups" not in body, "no group, no groups"


def test_bad_group_fields_get_400_naming_them(server):
    status, _, body = server.score({"items": [dict(ok_item(), group={"a": 1})]})
    assert status == 400
    assert body["error"]["field"] == "items[0].group"
    status, _, body = server.score({"group_id": [1], "items": [ok_item()]})
    assert status == 400
    assert body["error"]["field"] == "group_id"


def test_a_member_arriving_after_its_groups_deadline_fails_naming_the_group(server):
    group = "late-%d" % random.randrange(1 << 30)
    body = {"group_id": group, "group_deadline_ms": 200, "items": [ok_item()]}
    status, _, first = server.score(body)
    assert status == 200 and first["results"][0]["status"] == "ok"
    import time
    time.sleep(0.3)
    status, _, late = server.score(body)
    assert status == 200
    error = late["results"][0]["error"]
    assert error["code"] == "deadline_exceeded"
    assert f"group '{group}'" in error["message"]
    assert late["groups"][group]["failed"] == 1


def test_with_two_shards_a_group_stays_whole_when_a_request_mixes_in_a_model_reward(
        make_server, provider):
    """A GRPO group of CPU-reward members lives in one scheduler shard; a request that also
    holds a judge item (served by shard 0) must still count the member in that shard."""
    p = provider()
    s = make_server("[cpu]\nworkers = 2\n[scheduler]\nshards = 2\n",
                    env={"LLM_JUDGE_SERVER_URL": p.url})
    judge = {"reward": "judge", "solution_str": "a", "ground_truth": "a"}
    for k in range(8):  # some of the groups hash to shard 1
        group = f"mixed-{k}"
        member = {"reward": "exact_match", "solution_str": "4", "ground_truth": "4",
                  "group": group}
        status, _, body = s.score({"items": [member] * 4})
        assert status == 200 and body["groups"][group]["scored"] == 4, body
        status, _, body = s.score({"items": [dict(judge), member]})
        assert status == 200, body
        assert body["results"][0]["status"] == "ok", body["results"][0]
        assert body["groups"][group]["scored"] == 5, (group, body["groups"])
        status, _, body = s.score({"items": [member]})
        assert body["groups"][group]["scored"] == 6, (group, body["groups"])


def test_a_failed_math_dapo_item_reports_acc_and_pred_as_a_miss(server):
    """verl builds its reward_extra_info arrays from the first result's keys and reads them
    from every other: a failed math_dapo item must carry acc and pred too."""
    group = "dapo-%d" % random.randrange(1 << 30)
    item = {"data_source": "math_dapo", "solution_str": "Answer: 4", "ground_truth": "4",
            "group": group}
    body = {"items": [item], "group_deadline_ms": 100}
    status, _, first = server.score(body)
    assert status == 200 and first["results"][0]["extra"]["acc"] is True, first
    time.sleep(0.2)
    status, _, late = server.score(body)
    result = late["results"][0]
    assert result["status"] == "failed" and result["error"]["code"] == "deadline_exceeded"
    assert result["extra"] == {"acc": False, "pred": "[INVALID]"}
    # Kinds without such fields keep none on failure.
    status, _, plain = server.score({"items": [dict(ok_item(), group=group + "x")],
                                     "group_deadline_ms": 100})
    time.sleep(0.2)
    status, _, plain = server.score({"items": [dict(ok_item(), group=group + "x")],
                                     "group_deadline_ms": 100})
    assert plain["results"][0]["status"] == "failed" and "extra" not in plain["results"][0]
