"""GPU metrics from NVML: none on a machine without a GPU, and each GPU's memory, utilization
and model workers where NVML answers (here a stand-in library with two GPUs, loaded exactly as
the driver's libnvidia-ml.so.1 is)."""

from arbiter_testing import FAKE_NVML_LIBRARY


def test_without_a_gpu_the_server_says_nothing_of_gpus(make_server):
    s = make_server()  # the tests point ARBITER_NVML_LIBRARY at nothing
    status, _, metrics = s.request("GET", "/metrics")
    assert status == 200
    assert "arbiter_gpu_" not in metrics
    _, _, info = s.request("GET", "/info")
    assert "gpus" not in info


def test_each_gpu_is_shown_in_metrics_and_info(make_server):
    s = make_server(env={"ARBITER_NVML_LIBRARY": FAKE_NVML_LIBRARY})
    _, _, metrics = s.request("GET", "/metrics")
    assert 'arbiter_gpu_memory_total_bytes{gpu="0",name="Fake GPU 0"} 85899345920' in metrics
    assert 'arbiter_gpu_utilization_ratio{gpu="0",name="Fake GPU 0"} 0.37' in metrics

    def used(text, gpu):
        line = next(l for l in text.splitlines()
                    if l.startswith(f'arbiter_gpu_memory_used_bytes{{gpu="{gpu}"'))
        return float(line.split()[-1])

    _, _, again = s.request("GET", "/metrics")
    assert used(again, 1) > used(metrics, 1), "every scrape reads NVML"
    _, _, info = s.request("GET", "/info")
    assert [g["name"] for g in info["gpus"]] == ["Fake GPU 0", "Fake GPU 1"]
    g = info["gpus"][1]
    assert g["index"] == 1 and g["memory_total_bytes"] == 80 << 30
    assert 0 < g["memory_used_bytes"] < g["memory_total_bytes"]
    assert g["model_workers"] == []
