"""Renders helm/countersign once per ci/*-values.yaml, offline, into OUT/helm-<name>.yaml.

helm-python-sdk binds Helm's own Go SDK (libhelm_c, shipped in the wheel), so this is Helm's
template engine and values-schema check, with no helm binary and no cluster: `lookup` finds
nothing, as in `helm template`. Also runs `helm lint --strict` on each values file.

usage: render_chart.py CHART OUT
"""

import pathlib
import sys

import helm_python as helm

chart_dir, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
chart = helm.Chart.load(chart_dir)
failed = False
for values_file in sorted((chart_dir / "ci").glob("*-values.yaml")):
    mode = values_file.name.removesuffix("-values.yaml")
    values = helm.values_from_yaml(values_file.read_text())
    # render() alone does not check values.schema.json; an install would.
    chart.validate_schema(values)
    report = helm.lint(chart_dir, values, strict=True, namespace="mcp")
    problems = [m for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
    for problem in problems + [{"error": e} for e in report.get("errors") or []]:
        print(f"render_chart: {mode}: lint: {problem}", file=sys.stderr)
        failed = True
    manifests = chart.render(values, name="countersign", namespace="mcp", is_install=True)
    documents = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            (out / f"helm-{mode}.NOTES.txt").write_text(text)
        elif text.strip():
            documents.append(f"# Source: {path}\n{text.strip()}\n")
    (out / f"helm-{mode}.yaml").write_text("---\n".join(documents))
    print(f"render_chart: {mode}: {len(documents)} templates rendered", file=sys.stderr)
sys.exit(1 if failed else 0)
