"""The `dflash-operator` command: one subcommand per job the operator does for people and for CI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from dflash_operator import __version__


def _crd(args: argparse.Namespace) -> int:
    from dflash_operator.api.crd import render_crd_yaml

    text = render_crd_yaml()
    if args.output:
        for path in args.output:
            Path(path).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _rbac(args: argparse.Namespace) -> int:
    from dflash_operator.kube.rbac import render_rbac_yaml

    text = render_rbac_yaml()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _docs(args: argparse.Namespace) -> int:
    from dflash_operator.api.reference import api_reference_markdown
    from dflash_operator.status.reasons import troubleshooting_markdown

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "api.md").write_text(api_reference_markdown())
    (out / "troubleshooting.md").write_text(troubleshooting_markdown())
    return 0


def _render(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from dflash_operator.api import DFlashDeployment
    from dflash_operator.reconcile.validation import spec_problems
    from dflash_operator.render.cache import CacheConfig, cache_name
    from dflash_operator.render.desired import desired_objects
    from dflash_operator.render.serving import CacheFacts, RenderConfig

    source = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    body = yaml.safe_load(source)
    metadata = body.setdefault("metadata", {})
    metadata.setdefault("namespace", args.namespace)
    # The API server assigns the uid at creation; a placeholder keeps the ownerReference visible in review.
    metadata.setdefault("uid", "00000000-0000-0000-0000-000000000000")
    try:
        dfd = DFlashDeployment.model_validate(body)
    except ValidationError as error:
        print(f"invalid DFlashDeployment: {error}", file=sys.stderr)
        return 1
    problems = spec_problems(dfd)
    for problem in problems:
        print(f"{problem.reason}: {problem.message}", file=sys.stderr)
    if problems:
        return 1
    # Commits are resolved by the cache Job at run time; review shows the objects with them left blank.
    objects = desired_objects(dfd, RenderConfig(), CacheConfig(), CacheFacts(claim_name=cache_name(dfd)))
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, width=120))
    return 0


def _run(args: argparse.Namespace) -> int:
    import os

    import kubernetes

    from dflash_operator.kube.client import load_client
    from dflash_operator.runtime.config import ConfigError, from_environment
    from dflash_operator.runtime.main import run_operator

    # Fail here, in one line, rather than in a traceback from inside kopf's startup.
    try:
        config = from_environment(os.environ, namespaces=tuple(args.namespace), liveness_endpoint=args.liveness)
    except ConfigError as error:
        print(f"dflash-operator run: {error}", file=sys.stderr)
        return 2
    try:
        load_client()
    except kubernetes.config.ConfigException as error:
        print(f"dflash-operator run: no Kubernetes configuration (not in a cluster, no usable kubeconfig): {error}",
              file=sys.stderr)
        return 2
    return run_operator(config)


def _check_pair(args: argparse.Namespace) -> int:
    from dflash_cache.pairing import report_pair

    return report_pair(Path(args.target_dir), Path(args.draft_dir), args.num_speculative_tokens, args.vllm_version,
                       args.json)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dflash-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the operator against the current kubeconfig or in-cluster config")
    run.add_argument("-n", "--namespace", action="append", default=[],
                     help="watch only this namespace (repeatable); default: the whole cluster")
    run.add_argument("--liveness", default=None, help="kopf liveness endpoint (default http://0.0.0.0:8080/healthz)")
    run.set_defaults(handler=_run)

    render = commands.add_parser("render", help="print the objects the operator would create for a DFlashDeployment")
    render.add_argument("-f", "--file", required=True, help="the DFlashDeployment manifest, or - for stdin")
    render.add_argument("-n", "--namespace", default="default", help="namespace when the manifest names none")
    render.set_defaults(handler=_render)

    check = commands.add_parser("check-pair", help="check that a draft model fits a target model")
    check.add_argument("target_dir")
    check.add_argument("draft_dir")
    check.add_argument("--num-speculative-tokens", type=int, default=None)
    check.add_argument("--vllm-version", default=None,
                       help="the serving vLLM's version, for the rules that depend on it (e.g. 0.23.0)")
    check.add_argument("--json", action="store_true", help="print the problems as JSON")
    check.set_defaults(handler=_check_pair)

    crd = commands.add_parser("crd", help="print (or write) the CRD generated from the API models")
    crd.add_argument("-o", "--output", action="append",
                     help="write to this file instead of stdout (repeatable: crds/ and the chart's copy)")
    crd.set_defaults(handler=_crd)
    rbac = commands.add_parser("rbac", help="print (or write) the chart's RBAC rules generated from what the operator "
                                            "touches")
    rbac.add_argument("-o", "--output", help="write to this file (charts/dflash-operator/files/rbac.yaml)")
    rbac.set_defaults(handler=_rbac)
    docs = commands.add_parser("docs", help="write the generated docs: the API reference and the status reasons")
    docs.add_argument("-o", "--output", default="docs", help="the folder (default: docs)")
    docs.set_defaults(handler=_docs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
