"""The cluster's first slice (issue 7): a coordinator (`arbiter serve --cluster-port`) and worker
nodes (`arbiter worker --join`) as real processes on loopback, CAF's middleman between them.
Nodes serve the coordinator's CPU rewards beside its own workers; a node killed (SIGKILL) or
frozen (SIGSTOP, seen by heartbeat) mid-request loses no item: what it held is retried on the
others."""
import random
import signal
import socket
import subprocess
import threading
import time

import pytest

from arbiter_testing import ARBITER_BIN


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def cluster(make_server):
    """A coordinator with one CPU worker of its own, and a function that starts nodes."""
    port = free_port()
    server = make_server("[cpu]\nworkers = 1\n", args=("--cluster-port", str(port)))
    nodes = []

    def node(name, workers=1):
        proc = subprocess.Popen([ARBITER_BIN, "worker", "--join", f"127.0.0.1:{port}",
                                 "--name", name, "--cpu-workers", str(workers)],
                                stderr=subprocess.PIPE, text=True)
        nodes.append(proc)
        # Joined once its log says so.
        deadline = time.time() + 10
        while time.time() < deadline:
            line = proc.stderr.readline()
            if "joined" in line:
                threading.Thread(target=proc.stderr.read, daemon=True).start()
                return proc
            if not line and proc.poll() is not None:
                break
        raise RuntimeError(f"node {name} did not join")

    yield server, node, port
    for proc in nodes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


def lexical_items(n, size, seed=0):
    rng = random.Random(seed)
    text = lambda: "".join(rng.choice("abcdefgh ") for _ in range(size))  # noqa: E731
    return [{"data_source": "t", "reward": "lexical", "solution_str": text(),
             "ground_truth": text()} for _ in range(n)]


def test_two_nodes_serve_a_batch_with_the_coordinator(cluster):
    server, node, _ = cluster
    node("node-a")
    node("node-b")
    status, _, body = server.request("POST", "/v1/score", {"items": lexical_items(300, 400)})
    assert status == 200, body
    assert all(r["status"] == "ok" for r in body["results"]), body["results"][:3]
    assert {"node-a", "node-b"} <= {r["source"] for r in body["results"]}


@pytest.mark.parametrize("fault", ["kill", "freeze"])
def test_a_node_lost_under_load_loses_no_item(cluster, fault):
    """Requests stream in while one node dies (SIGKILL) or freezes (SIGSTOP): every item of
    every request is scored, the lost node's share retried on the others."""
    server, node, _ = cluster
    doomed = node("node-doomed", workers=2)
    node("node-ok")
    replies = []
    stop = threading.Event()

    def stream():
        conn = server.connection()
        for k in range(400):
            if stop.is_set() and k % 10 == 0 and len(replies) > 40:
                break
            replies.append(server.request("POST", "/v1/score", {
                "items": lexical_items(40, 300, seed=k), "deadline_ms": 60000}, conn=conn))

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.4)
    assert t.is_alive(), "the stream ended before the fault"
    served_before = sum(r["source"] == "node-doomed" for _, _, b in replies for r in b["results"])
    doomed.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    fault_at = time.time()
    time.sleep(4.0 if fault == "freeze" else 1.0)  # past the heartbeat's connection timeout
    stop.set()
    t.join(60)
    assert not t.is_alive()
    assert served_before > 0, "the doomed node served nothing before the fault"
    for status, _, body in replies:
        assert status == 200, body
        bad = [r for r in body["results"] if r["status"] != "ok"]
        assert not bad, bad[:2]
    # After detection the lost node serves nothing more.
    status, _, body = server.request("POST", "/v1/score", {"items": lexical_items(60, 300)})
    assert status == 200
    assert "node-doomed" not in {r["source"] for r in body["results"]}
    assert time.time() - fault_at < 30


def test_a_node_rejoins_a_restarted_coordinator(make_server, cluster):
    server, node, port = cluster
    node("node-a")
    status, _, body = server.request("POST", "/v1/score", {"items": lexical_items(200, 300)})
    assert "node-a" in {r["source"] for r in body["results"]}
    server.stop()
    # A new coordinator on the same cluster port: the node joins it again (backoff from 250 ms).
    again = make_server("[cpu]\nworkers = 1\n", args=("--cluster-port", str(port)))
    deadline = time.time() + 15
    seen = set()
    while time.time() < deadline and "node-a" not in seen:
        time.sleep(0.3)
        status, _, body = again.request("POST", "/v1/score", {"items": lexical_items(200, 300)})
        assert status == 200 and all(r["status"] == "ok" for r in body["results"])
        seen = {r["source"] for r in body["results"]}
    assert "node-a" in seen, "the node did not rejoin the restarted coordinator"
