"""deploy/k8s/: valid against the Kubernetes JSON schemas, offline (no cluster is started).

kubernetes-validate (PyPI; the test extra) carries the schemas of every Kubernetes
release; each manifest is checked strictly (an unknown field fails) against the oldest
release we name and the newest it has. The probes must call `privfl health` on the
folder the party writes to, the pods run as the images' user on a read-only root, and
a site's party accepts no inbound connection.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

validate = pytest.importorskip(
    "kubernetes_validate.utils", reason="pip install kubernetes-validate"
)

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
CONTAINERFILE = K8S.parent / "containers" / "Containerfile"
VERSIONS = ("1.31.0", validate.latest_version())


def manifests(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def pod_spec(name: str, kind: str) -> dict[str, Any]:
    (found,) = [d for d in manifests(name) if d["kind"] == kind]
    spec: dict[str, Any] = found["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["site-party.yaml", "relay.yaml"])
def test_every_manifest_is_valid_against_the_kubernetes_schemas(name: str, version: str) -> None:
    docs = manifests(name)
    assert len(docs) >= 3
    for doc in docs:
        validate.validate(doc, version, strict=True)  # raises on the first fault


def test_the_validator_rejects_a_misspelt_probe() -> None:
    # The leaky arm: the same Job with one field misspelt fails, so a pass means something.
    (job, *_) = manifests("site-party.yaml")
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["livenesProbe"] = container.pop("livenessProbe")
    with pytest.raises(validate.ValidationError, match="livenesProbe"):
        validate.validate(job, VERSIONS[0], strict=True)


def test_the_party_probes_read_the_folder_it_writes_as_the_images_user() -> None:
    spec = pod_spec("site-party.yaml", "Job")
    (party,) = spec["containers"]
    out = party["args"][party["args"].index("--out") + 1]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert party[probe]["exec"]["command"] == ["privfl", "health", "--out", out]
    user = re.search(r"^USER (\d+):(\d+)$", CONTAINERFILE.read_text(), re.M)
    assert user is not None
    for name, kind in (("site-party.yaml", "Job"), ("relay.yaml", "Deployment")):
        spec = pod_spec(name, kind)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == int(user[1])
        for container in spec["initContainers"] + spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_site_accepts_no_connection_and_the_relay_opens_none() -> None:
    (site,) = [d for d in manifests("site-party.yaml") if d["kind"] == "NetworkPolicy"]
    (relay,) = [d for d in manifests("relay.yaml") if d["kind"] == "NetworkPolicy"]
    assert site["spec"]["ingress"] == [] and "Ingress" in site["spec"]["policyTypes"]
    assert relay["spec"]["egress"] == [] and "Egress" in relay["spec"]["policyTypes"]
    (party,) = pod_spec("site-party.yaml", "Job")["containers"]
    assert "ports" not in party
