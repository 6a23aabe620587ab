"""deploy/ stays true to the code: the example configurations pass `arbiter check-config`
(with certificates from deploy/certs/make-certs.sh where the files would be mounted), the
Kubernetes manifest carries the same files and ports, the Slurm script parses, and the Grafana
dashboard queries only metrics and labels docs/metrics.md lists."""
import json
import re
import subprocess
import tomllib
from pathlib import Path

import promql_parser
import pytest
import yaml

from arbiter_testing import ARBITER_BIN

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    subprocess.run(["bash", str(DEPLOY / "certs" / "make-certs.sh"), str(folder), "coordinator",
                    "node"], check=True, capture_output=True)
    return folder


def manifest():
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / "arbiter.yaml").read_text()))


@pytest.mark.parametrize("name", ["coordinator.toml", "node.toml"])
def test_example_configs_pass_check_config(tmp_path, pki, name):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "api-keys").write_text("sk-deploy-test-key\n")
    text = (DEPLOY / "config" / name).read_text().replace("/etc/arbiter/tls", str(pki)) \
        .replace("/etc/arbiter/keys", str(tmp_path / "keys"))
    # check-config reads what this machine holds: the model folders as the node mounts them.
    for folder in re.findall(r'path = "/models/([^"]+)"', text):
        (tmp_path / "models" / folder).mkdir(parents=True)
        (tmp_path / "models" / folder / "config.json").write_text("{}")
    text = text.replace('path = "/models/', f'path = "{tmp_path / "models"}/')
    path = tmp_path / name
    path.write_text(text)
    run = subprocess.run([ARBITER_BIN, "check-config", str(path)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_certificates_chain_to_their_ca(pki):
    for member in ("coordinator", "node"):
        run = subprocess.run(["openssl", "verify", "-CAfile", str(pki / "ca.pem"),
                              str(pki / f"{member}.pem")], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert (pki / f"{member}.key").stat().st_mode & 0o077 == 0, "keys are private"


def test_the_kubernetes_manifest_matches_the_configs():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifest()}
    config_map = docs[("ConfigMap", "arbiter-config")]["data"]
    for name in ("coordinator.toml", "node.toml"):
        assert config_map[name] == (DEPLOY / "config" / name).read_text(), name
    coordinator = tomllib.loads(config_map["coordinator.toml"])
    service = {p["name"]: p["port"] for p in docs[("Service", "arbiter")]["spec"]["ports"]}
    assert service == {"http": coordinator["server"]["port"],
                       "cluster": coordinator["cluster"]["port"]}
    worker = docs[("Deployment", "arbiter-worker")]["spec"]["template"]["spec"]["containers"][0]
    join = worker["args"][worker["args"].index("--join") + 1]
    assert join == f"arbiter:{coordinator['cluster']['port']}"
    pod = docs[("Deployment", "arbiter-coordinator")]["spec"]["template"]["spec"]
    probe = pod["containers"][0]["readinessProbe"]["httpGet"]
    assert probe["path"] == "/health"
    status_port = int(worker["args"][worker["args"].index("--status-port") + 1])
    assert worker["ports"] == [{"name": "status", "containerPort": status_port}]
    assert worker["readinessProbe"]["httpGet"] == {"path": "/health", "port": "status"}
    # Both mount the TLS secret where the configs look for it.
    for d in ("arbiter-coordinator", "arbiter-worker"):
        mounts = docs[("Deployment", d)]["spec"]["template"]["spec"]["containers"][0][
            "volumeMounts"]
        assert {"name": "tls", "mountPath": "/etc/arbiter/tls", "readOnly": True} in mounts
    # The coordinator mounts the API keys where its config reads them.
    mounts = docs[("Deployment", "arbiter-coordinator")]["spec"]["template"]["spec"][
        "containers"][0]["volumeMounts"]
    key_file = Path(coordinator["server"]["api_key_file"])
    assert {"name": "api-keys", "mountPath": str(key_file.parent), "readOnly": True} in mounts


def test_the_slurm_script_parses():
    run = subprocess.run(["bash", "-n", str(DEPLOY / "slurm" / "arbiter.sbatch")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# ---- the Grafana dashboard ---------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_metrics():
    """{name: (type, label names)} from docs/metrics.md's tables."""
    rows = re.findall(r"^\| `(arbiter_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|",
                      (DOCS / "metrics.md").read_text(), re.M)
    return {name: (kind, set(re.findall(r"`([a-z_]+)`", labels))) for name, kind, labels in rows}


def dashboard():
    return json.loads((DEPLOY / "grafana" / "arbiter.json").read_text())


def test_the_dashboard_queries_only_documented_metrics_and_labels():
    """Every query parses as PromQL, names metrics docs/metrics.md lists (a histogram through
    its _bucket, _sum or _count series) and groups by labels those metrics have."""
    known = documented_metrics()
    assert len(known) > 30
    queried = set()
    for panel in dashboard()["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            promql_parser.parse(expr)  # raises on a malformed query
            names = set()
            for name in re.findall(r"\barbiter_[a-z0-9_]+", expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if base != name and known.get(base, ("",))[0] == "histogram":
                    name = base
                assert name in known, f"{panel['title']}: {name} is not in docs/metrics.md"
                names.add(name)
            labels = set().union(*(known[n][1] for n in names)) | {"le"}
            for group in re.findall(r"\bby \(([^)]*)\)", expr):
                for label in filter(None, (x.strip() for x in group.split(","))):
                    assert label in labels, f"{panel['title']}: no label {label} on {names}"
            queried |= names
    # What the dashboard must show (issue: GRPO-aware).
    for must in ("arbiter_items_total", "arbiter_item_latency_seconds", "arbiter_queue_depth",
                 "arbiter_queue_wait_seconds", "arbiter_source_attempts_total",
                 "arbiter_source_rate_limited_total", "arbiter_source_breaker_state",
                 "arbiter_source_concurrency_limit", "arbiter_source_tokens_total",
                 "arbiter_source_cost_total", "arbiter_group_completion_seconds",
                 "arbiter_cluster_nodes"):
        assert must in queried, must


def test_the_dashboard_is_well_formed():
    doc = dashboard()
    assert doc["uid"] == "arbiter"
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
