"""docs/deploy.md gives commands that work where they run.

* kube-scheduler reads ``--config`` on its own node; a kubeadm static pod sees only the host paths
  its manifest mounts (kubeadm's kube-scheduler.yaml mounts ``/etc/kubernetes/scheduler.conf``
  alone). The doc passed ``--config=deploy/kube-scheduler-config.yaml``, a path of the checkout
  that no control-plane node has; the config now goes to the folder of step 2, which the doc has
  mounted into the static pod.
* The image's entry point binds ``0.0.0.0`` (IPv4 only); on IPv6 pod networks the doc says to pass
  ``args: ["--host", "::"]``, which Kubernetes appends to the entry point (``args`` replaces CMD,
  never ENTRYPOINT: Kubernetes "Define a command and arguments for a container"), so the CLI must
  take the last ``--host``.
"""

from __future__ import annotations

import json
import re

from fleetmind.cli import build_parser
from fleetmind.data.paths import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "deploy.md").read_text()
DOCKERFILE = (REPO_ROOT / "deploy" / "container" / "Dockerfile").read_text()


def test_kube_scheduler_reads_its_config_from_the_mounted_node_folder() -> None:
    section = DOC[DOC.index("### kube-scheduler over HTTPS") :]
    section = section[: section.index("\n## ")]
    configs = re.findall(r"--config=(\S+?)`", section)
    assert configs, "the section names kube-scheduler's --config"
    # the certificates' folder, which step 2 mounts into the static pod
    mounted = "/etc/kubernetes/fleetmind"
    assert f"mount `{mounted}`" in section
    for path in configs:
        assert path.startswith(mounted + "/"), path
        assert f"{path}`" in section.replace("\n   ", " ")  # and says to copy the file there
    copies = re.findall(r"install -D -m 0644 deploy/kube-scheduler-config\.yaml\s+(\S+?)`", section)
    assert copies and set(copies) == set(configs), (copies, configs)


def test_the_documented_ipv6_host_overrides_the_image_default() -> None:
    assert '`args: ["--host", "::"]`' in DOC
    (entry,) = re.findall(r"^ENTRYPOINT (\[.*\])$", DOCKERFILE, re.M)
    argv = json.loads(entry)
    assert argv[:2] == ["fleetmind", "serve"] and "0.0.0.0" in argv
    args = build_parser().parse_args([*argv[1:], "--host", "::"])
    assert args.host == "::"
