#!/usr/bin/env python3
"""Asserts on reloadlet's rendered manifests; run by hack/check-manifests.sh.

    check_manifests.py --kustomize K.yaml --chart-default D.yaml --chart-full F.yaml \
        [--chart-full-kubelet-root DIR] [--chart-release R.yaml] [--chart-knobs K.yaml] \
        [--overlay NAME=FILE=KUBELET_ROOT[=NAMESPACE=FULLNAME] ...] [--chart-secrets S.yaml] [--chart-no-policy P.yaml] \
        [--chart-no-controller C.yaml] [--kustomize-no-policy P.yaml] [--kustomize-no-controller C.yaml] \
        [--monitoring M.yaml] [--repo DIR] [--steps STEPS.tsv] [--self-test]

--chart-default is the chart's defaults as release "reloadlet" in reloadlet-system;
--chart-full the same release with createNamespace, serviceMonitor, prometheusRule,
grafanaDashboard and privileged on and kubeletRoot=--chart-full-kubelet-root;
--chart-release a release "prod" in "apps-prod" with the monitoring on; --chart-knobs
a release "knobs" in "knobs-ns" with manifest_checks.KNOBS set. --overlay adds a
kustomize overlay's render, whose kubelet root must be KUBELET_ROOT (and whose
objects are named FULLNAME[-…] in NAMESPACE, when given; default reloadlet-system/reloadlet). The controller
variants: the chart's defaults with controller.secrets=true, controller.admissionPolicy=false,
controller.enabled=false; deploy/ with the admission-policy component line, and with
both controller lines, deleted from deploy/base/kustomization.yaml. --steps adds the results of earlier steps (helm lint,
kubernetes-validate) to the tally: lines "PASS|FAIL<TAB>name<TAB>detail".
Prints one line per check, then "manifests: N passed, M failed"; exits 1 on
any failure. --self-test instead proves that every check can fail: each
mutation in manifest_mutations.py must make its target check fail, and every
check must be targeted; it ends with "self-test: N passed, M failed".
"""

from __future__ import annotations

import argparse
import copy
import sys
import tomllib
from pathlib import Path

import yaml

sys.dont_write_bytecode = True  # keep hack/ free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))

from manifest_checks import (  # noqa: E402
    RENDER_CHECKS,
    Context,
    Render,
    Result,
    _container,
    _one,
    results_by_key,
    run_all,
)
from manifest_mutations import MUTATIONS  # noqa: E402


class InputError(Exception):
    """An input file is missing or is not what it should be."""


def load_docs(path: str) -> list[dict]:
    """Parses a multi-document YAML file, skipping empty documents."""
    try:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{path}: {e}") from e
    bad = [d for d in docs if not isinstance(d, dict) or "kind" not in d]
    if bad:
        raise InputError(f"{path}: {len(bad)} document(s) without a kind")
    return docs


def image_tag(docs: list[dict]) -> str:
    """The tag of the agent's image in a render ("" when it has none)."""
    image = _container(docs).get("image", "")
    name = image.rsplit("/", 1)[-1]
    return name.split(":", 1)[1] if ":" in name else ""


def read_versions(repo: Path, renders: dict[str, Render]) -> dict[str, str]:
    """Versions that must all be equal: the crate's, the chart's appVersion, image tags."""
    try:
        cargo = tomllib.loads((repo / "Cargo.toml").read_text(encoding="utf-8"))["package"]["version"]
        chart = yaml.safe_load((repo / "deploy/chart/reloadlet/Chart.yaml").read_text(encoding="utf-8"))
    except (OSError, KeyError, tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise InputError(f"reading versions: {e}") from e
    versions = {"cargo": str(cargo), "Chart.yaml appVersion": str(chart.get("appVersion"))}
    for name in ("kustomize", "chart-default"):
        if name in renders:
            versions[f"{name} image tag"] = image_tag(renders[name].docs)
    return versions


def read_files(repo: Path) -> dict[str, str]:
    """The repository files check_repo reads: the Dockerfile and hack/*.sh."""
    paths = [repo / "Dockerfile", *sorted((repo / "hack").glob("*.sh"))]
    try:
        return {str(p.relative_to(repo)): p.read_text(encoding="utf-8") for p in paths}
    except OSError as e:
        raise InputError(f"reading {e.filename}: {e}") from e


def read_steps(path: str) -> list[Result]:
    """Results of earlier steps of check-manifests.sh."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"{path}: {e}") from e
    for line in lines:
        if not line.strip():
            continue
        status, name, *detail = line.split("\t")
        out.append(Result(name, "step", status == "PASS", " ".join(detail)))
    return out


def print_results(results: list[Result], label: str) -> int:
    """Prints one line per result and the tally; returns the number of failures."""
    failed = 0
    for r in results:
        mark = "PASS" if r.ok else "FAIL"
        failed += not r.ok
        line = f"{mark}  {r.subject}: {r.check}"
        if not r.ok and r.detail:
            line += f" -- {r.detail}"
        print(line)
    print(f"{label}: {len(results) - failed} passed, {failed} failed")
    return failed


def self_test(ctx: Context) -> int:
    """Every mutation must fail its target check; every check must be targeted."""
    results: list[Result] = []
    baseline = results_by_key(run_all(ctx))
    broken = [r for r in baseline.values() if not r.ok]
    results.append(Result("baseline renders pass every check", "self-test", not broken,
                          "; ".join(f"{r.subject}: {r.check}" for r in broken)))
    for m in MUTATIONS:
        mutated = copy.deepcopy(ctx)
        try:
            m.apply(mutated)
        except (KeyError, IndexError, StopIteration, TypeError) as e:
            results.append(Result(f"{m.description} (mutation could not apply: {e!r})", "self-test", False))
            continue
        got = results_by_key(run_all(mutated)).get((m.check, m.subject))
        caught = got is not None and not got.ok
        results.append(Result(f"{m.description} -> caught by '{m.check}'", m.subject, caught,
                              "check passed" if got else "check did not run"))
    targeted = {m.check for m in MUTATIONS}
    all_checks = {name for name, _ in RENDER_CHECKS} | {r.check for r in baseline.values()}
    untested = sorted(all_checks - targeted)
    results.append(Result("every check is targeted by a mutation", "self-test", not untested, f"untested {untested}"))
    return print_results(results, "self-test")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kustomize", required=True)
    p.add_argument("--chart-default", required=True)
    p.add_argument("--chart-full", required=True)
    p.add_argument("--chart-full-kubelet-root", default="/var/lib/kubelet")
    p.add_argument("--chart-release")
    p.add_argument("--chart-knobs")
    p.add_argument("--overlay", action="append", default=[], metavar="NAME=FILE=KUBELET_ROOT")
    p.add_argument("--chart-secrets")
    p.add_argument("--chart-compat")
    p.add_argument("--chart-argo")
    p.add_argument("--chart-no-policy")
    p.add_argument("--chart-no-controller")
    p.add_argument("--kustomize-no-policy")
    p.add_argument("--kustomize-no-controller")
    p.add_argument("--monitoring")
    p.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("--steps")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args(argv)

    try:
        renders = {
            "kustomize": Render("kustomize", load_docs(args.kustomize), owns_namespace=True),
            "chart-default": Render("chart-default", load_docs(args.chart_default), flow_schema=True),
            "chart-full": Render("chart-full", load_docs(args.chart_full), privileged=True, service_monitor=True,
                                 kubelet_root=args.chart_full_kubelet_root, owns_namespace=True, monitoring=True,
                                 flow_schema=True),
        }
        if args.chart_release:
            renders["chart-release"] = Render("chart-release", load_docs(args.chart_release), service_monitor=True,
                                              monitoring=True, fullname="prod-reloadlet", namespace="apps-prod",
                                              flow_schema=True)
        if args.chart_knobs:
            renders["chart-knobs"] = Render("chart-knobs", load_docs(args.chart_knobs), knobs=True,
                                            fullname="knobs-agent", namespace="knobs-ns", flow_schema=True)
        if args.chart_secrets:
            renders["chart-secrets"] = Render("chart-secrets", load_docs(args.chart_secrets), controller_secrets=True,
                                              flow_schema=True)
        if args.chart_compat:
            renders["chart-compat"] = Render("chart-compat", load_docs(args.chart_compat), reloader_compat=True,
                                             flow_schema=True)
        if args.chart_argo:
            renders["chart-argo"] = Render("chart-argo", load_docs(args.chart_argo), argo=True,
                                           flow_schema=True)
        if args.chart_no_policy:
            renders["chart-no-policy"] = Render("chart-no-policy", load_docs(args.chart_no_policy), admission_policy=False, agent_policy=False)
        if args.chart_no_controller:
            renders["chart-no-controller"] = Render("chart-no-controller", load_docs(args.chart_no_controller),
                                                    controller=False, admission_policy=False, agent_policy=False)
        if args.kustomize_no_policy:
            renders["kustomize-no-policy"] = Render("kustomize-no-policy", load_docs(args.kustomize_no_policy),
                                                    owns_namespace=True, admission_policy=False, agent_policy=False)
        if args.kustomize_no_controller:
            renders["kustomize-no-controller"] = Render("kustomize-no-controller", load_docs(args.kustomize_no_controller),
                                                        owns_namespace=True, controller=False, admission_policy=False, agent_policy=False)
        for spec in args.overlay:
            parts = spec.split("=")
            if len(parts) not in (3, 5):
                raise InputError(f"--overlay {spec!r}: want NAME=FILE=KUBELET_ROOT[=NAMESPACE=FULLNAME]")
            name, path, kubelet_root = parts[:3]
            named = dict(namespace=parts[3], fullname=parts[4]) if len(parts) == 5 else {}
            renders[f"overlay-{name}"] = Render(f"overlay-{name}", load_docs(path), kubelet_root=kubelet_root,
                                                owns_namespace=True, **named)
        for r in renders.values():
            _one(r.docs, "DaemonSet")
        ctx = Context(
            renders=renders,
            monitoring=load_docs(args.monitoring) if args.monitoring else None,
            monitoring_twin="chart-full",
            monitoring_install="kustomize",
            versions=read_versions(Path(args.repo), renders),
            files=read_files(Path(args.repo)),
            agree=("kustomize", "chart-default"),
        )
        steps = read_steps(args.steps) if args.steps else []
    except Exception as e:  # noqa: BLE001 -- any unreadable input is reported, not raised
        print(f"FAIL  input: {e}")
        print("manifests: 0 passed, 1 failed")
        return 1

    if args.self_test:
        return 1 if self_test(ctx) else 0
    return 1 if print_results(steps + run_all(ctx), "manifests") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
