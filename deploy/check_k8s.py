"""Renders every kustomization under deploy/k8s with the real kustomize, and the Helm chart
under deploy/helm, and checks what they render.

Run by deploy/check-k8s.sh (which makes the virtualenv with PyYAML and kubernetes-validate,
installs kustomize with deploy/install-kustomize.sh and passes its path in KUSTOMIZE);
usage: check_k8s.py [K8S_DIR] checks, and exits 1 naming every problem found, 0 when there
is none.

Checks, for each rendered kustomization:
- every Kubernetes object against the Kubernetes OpenAPI schemas of the versions in
  K8S_VERSIONS, strict (an unknown field is an error), with kubernetes-validate;
- ServiceMonitor (a CRD the schemas lack) by its structure: its fields, a selector matching
  exactly one Service, and endpoint ports that Service has;
- PrometheusRule (another) by its structure: groups with unique names, each rule an alert or
  a recording rule with an expression, durations Prometheus reads, string labels and
  annotations (tests/deploy.rs checks what the expressions name);
- references between objects: Service selectors and target ports, a StatefulSet's headless
  Service, PodDisruptionBudget selectors, ConfigMaps, Secrets and claims named by pods, volume
  mounts, probe ports, `$(VAR)` references in env;
- the restricted Pod Security Standard for every pod, plus a read-only root filesystem,
  resource requests and a memory limit, no service account token, and pinned images (the
  base's images tagged with the crate's version);
- sluice.toml (SLUICE_CONFIG): TOML, and every `${env:NAME}` it names is set in each
  container that reads it.
The Helm chart (deploy/helm/sluice, rendered with the real Helm whose path deploy/check-k8s.sh
passes in HELM) gets the same checks, with its default values and with
examples/production.yaml, and must render the same objects as its kustomize twin (the base,
and the production overlay): the same kinds, names and fields, but for kustomize's hash
suffixes on generated ConfigMaps, Helm's checksum and hook annotations, and namespaces.
Secrets are not applied from the repository: a Secret a pod names must be defined in a
`*.example.yaml` beside the manifests, with every key the pods read.
"""

import json
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path, PurePosixPath

import jsonschema
import referencing
import yaml
from kubernetes_validate import utils as kv

K8S_VERSIONS = ["1.30", "1.37"]
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}
# The volume types the restricted Pod Security Standard allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SERVICEMONITOR_SPEC = {
    "selector",
    "endpoints",
    "namespaceSelector",
    "jobLabel",
    "targetLabels",
    "podTargetLabels",
    "sampleLimit",
    "targetLimit",
    "labelLimit",
    "labelNameLengthLimit",
    "labelValueLengthLimit",
    "keepDroppedTargets",
    "attachMetadata",
    "scrapeProtocols",
    "scrapeClass",
    "bodySizeLimit",
}
SERVICEMONITOR_ENDPOINT = {
    "port",
    "targetPort",
    "path",
    "scheme",
    "params",
    "interval",
    "scrapeTimeout",
    "tlsConfig",
    "bearerTokenFile",
    "bearerTokenSecret",
    "authorization",
    "basicAuth",
    "oauth2",
    "honorLabels",
    "honorTimestamps",
    "trackTimestampsStaleness",
    "metricRelabelings",
    "relabelings",
    "proxyUrl",
    "followRedirects",
    "enableHttp2",
    "filterRunning",
}
PROMETHEUSRULE_GROUP = {"name", "interval", "limit", "partial_response_strategy", "query_offset", "labels", "rules"}
PROMETHEUSRULE_RULE = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
# Prometheus's duration: units from the largest down, each at most once (1h30m, 5m, 30s).
DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")


class RenderError(Exception):
    pass


def render(command, installer):
    """The objects a render command prints (a list of dicts), or a RenderError saying why
    there are none; `installer` is the script that installs the command's tool."""
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise RenderError(f"running {command[0]}: {e} ({installer} installs it)") from e
    what = f"{Path(command[0]).name} {command[1]}"
    if done.returncode != 0:
        raise RenderError(f"{what}: {done.stderr.strip()}")
    try:
        return [d for d in yaml.safe_load_all(done.stdout) if d is not None]
    except yaml.YAMLError as e:
        raise RenderError(f"{what} printed YAML PyYAML cannot read: {e}") from e


def build(directory):
    """The objects `kustomize build DIRECTORY` renders: the real kustomize, whose path
    deploy/check-k8s.sh passes in KUSTOMIZE."""
    kustomize = os.environ.get("KUSTOMIZE", "kustomize")
    return render([kustomize, "build", str(directory)], "deploy/install-kustomize.sh")


def render_chart(chart, args):
    """The objects `helm template sluice CHART ARGS...` renders: the real Helm, whose path
    deploy/check-k8s.sh passes in HELM."""
    helm = os.environ.get("HELM", "helm")
    return render([helm, "template", "sluice", str(chart), *args], "deploy/install-helm.sh")


# A ConfigMap kustomize generated, named with the hash of its contents.
HASHED_CONFIGMAP = re.compile(r"\b(sluice-(?:settings|pipelines|calendars|alert-routes))-[a-z0-9]{10}\b")
# Annotations only Helm's render has: checksums that roll pods (kustomize's hashed names do
# that), and the setup Job's hook.
HELM_ONLY_ANNOTATIONS = ("checksum/", "helm.sh/")


def comparable(objects):
    """The objects by (kind, name), as a kustomization and the chart should both render them:
    no Namespace, no namespaces, generated ConfigMaps by their unhashed names, no Helm-only
    annotations."""

    def strip(node):
        if isinstance(node, dict):
            meta = node.get("metadata")
            if isinstance(meta, dict):
                meta.pop("namespace", None)
                kept = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(HELM_ONLY_ANNOTATIONS)}
                if kept:
                    meta["annotations"] = kept
                else:
                    meta.pop("annotations", None)
            for v in node.values():
                strip(v)
        elif isinstance(node, list):
            for v in node:
                strip(v)

    out = {}
    for o in objects:
        if o.get("kind") == "Namespace":
            continue
        o = json.loads(HASHED_CONFIGMAP.sub(r"\1", json.dumps(o)))
        strip(o)
        out[(o["kind"], o["metadata"]["name"])] = o
    return out


def first_difference(a, b, path="."):
    """Where two rendered objects first differ, and how (None when they are the same)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}{k}: only in the {'chart' if k in b else 'kustomization'}"
            found = first_difference(a[k], b[k], f"{path}{k}.")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items in the kustomization, {len(b)} in the chart"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}].")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} in the kustomization, {b!r} in the chart"


def twin_problems(label, kustomized, charted):
    """What differs between a kustomization's render and the chart's."""
    k, c = comparable(kustomized), comparable(charted)
    problems = [f"{label}: {kind}/{name} only in the kustomization" for kind, name in sorted(set(k) - set(c))]
    problems += [f"{label}: {kind}/{name} only in the chart" for kind, name in sorted(set(c) - set(k))]
    for key in sorted(set(k) & set(c)):
        found = first_difference(k[key], c[key])
        if found:
            problems.append(f"{label}: {key[0]}/{key[1]} differs at {found}")
    return problems


def load_yaml_documents(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise RenderError(f"{path}: {e}") from e


def kustomization_file(directory):
    for name in KUSTOMIZATION_NAMES:
        if (directory / name).is_file():
            return directory / name
    return None


def show(doc):
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def split_image(image):
    """(name, tag, digest) of an image reference."""
    name, _, digest = image.partition("@")
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        return name[:colon], name[colon + 1 :], digest
    return name, "", digest


def pod_specs(doc):
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Pod":
        return [spec]
    if kind == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})]
    if kind in WORKLOADS:
        return [spec.get("template", {}).get("spec", {})]
    return []


def pod_labels(doc):
    if doc["kind"] == "Pod":
        return doc["metadata"].get("labels") or {}
    if doc["kind"] == "CronJob":
        template = doc["spec"]["jobTemplate"]["spec"]["template"]
    else:
        template = doc["spec"]["template"]
    return (template.get("metadata") or {}).get("labels") or {}


def containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def configmap_refs(spec):
    """The dicts in a pod spec whose `name` names a ConfigMap."""
    refs = []
    for volume in spec.get("volumes") or []:
        if "configMap" in volume:
            refs.append(volume["configMap"])
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "configMap" in source:
                refs.append(source["configMap"])
    for c in containers(spec):
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
            if ref:
                refs.append(ref)
        for env in c.get("envFrom") or []:
            if "configMapRef" in env:
                refs.append(env["configMapRef"])
    return refs


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---- schema validation ----


@cache
def schema_file(name, version):
    return kv.schema_contents(f"kubernetes-json-schema/{name}", version)


@cache
def definitions_registry(directory, full):
    """The shared definitions every schema of a version refers to (by their $id)."""
    definitions = schema_file(f"{directory}/_definitions.json", full)
    return referencing.Resource.from_contents(definitions) @ referencing.Registry()


@cache
def full_version(version):
    found = [v for v in kv.all_versions() if kv.major_minor(v) == version]
    if not found:
        raise SystemExit(f"kubernetes-validate {kv.__version__} has no schemas for Kubernetes {version}")
    return found[-1]


def schema_errors(doc, version):
    """Strict schema errors of `doc` for Kubernetes `version`; None when it has no schema."""
    full = full_version(version)
    api = doc["apiVersion"]
    group = api.rpartition("/")[0].split(".")[0]
    api_name = f"{group}-{api.rpartition('/')[2]}" if group else api
    directory = f"v{full}-local-strict"
    try:
        schema = schema_file(f"{directory}/{doc['kind'].lower()}-{api_name}.json", full)
    except FileNotFoundError:
        return None
    registry = referencing.Resource.from_contents(schema) @ definitions_registry(directory, full)
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    errors = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in e.absolute_path) or "(top)"
        errors.append(f"{where}: {e.message}")
    return errors


# ---- checks ----


class Checker:
    def __init__(self, label, objects, examples, crate_version):
        self.label = label
        self.objects = objects
        self.examples = examples
        self.crate_version = crate_version
        self.problems = []

    def problem(self, doc, message):
        self.problems.append(f"{self.label}: {show(doc) if doc else ''}: {message}")

    def of_kind(self, kind):
        return [o for o in self.objects if o["kind"] == kind]

    def find(self, kind, name, namespace):
        for o in self.objects:
            meta = o["metadata"]
            if o["kind"] == kind and meta.get("name") == name and meta.get("namespace") == namespace:
                return o
        return None

    def run(self):
        for doc in self.objects:
            if doc["kind"] == "ServiceMonitor":
                self.check_servicemonitor(doc)
                continue
            if doc["kind"] == "PrometheusRule":
                self.check_prometheusrule(doc)
                continue
            for version in K8S_VERSIONS:
                errors = schema_errors(doc, version)
                if errors is None:
                    self.problem(doc, f"{doc['apiVersion']}: no Kubernetes {version} schema, and no check here")
                    break
                for e in errors:
                    self.problem(doc, f"Kubernetes {version} schema: {e}")
        for doc in self.objects:
            for spec in pod_specs(doc):
                self.check_pod(doc, spec)
        self.check_workloads()
        self.check_services()
        self.check_pdbs()
        return self.problems

    def check_servicemonitor(self, doc):
        if doc.get("apiVersion") != "monitoring.coreos.com/v1":
            self.problem(doc, f"apiVersion {doc.get('apiVersion')}: monitoring.coreos.com/v1")
        extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
        if extra:
            self.problem(doc, f"unknown fields {sorted(extra)}")
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        if not meta.get("name"):
            self.problem(doc, "metadata.name is missing")
        extra = set(spec) - SERVICEMONITOR_SPEC
        if extra:
            self.problem(doc, f"spec: unknown fields {sorted(extra)}")
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if set(spec.get("selector") or {}) - {"matchLabels"} or not selector:
            self.problem(doc, "spec.selector: matchLabels, non-empty, is what this check reads")
        if "namespaceSelector" in spec:
            self.problem(doc, "spec.namespaceSelector: not checked here (the Service must be in its namespace)")
        services = [
            s
            for s in self.of_kind("Service")
            if s["metadata"].get("namespace") == meta.get("namespace")
            and matches(selector, s["metadata"].get("labels") or {})
        ]
        if len(services) != 1:
            names = [show(s) for s in services]
            self.problem(doc, f"spec.selector {selector} matches {len(services)} Services {names}: one, or pods are scraped twice or not at all")
        endpoints = spec.get("endpoints")
        if not isinstance(endpoints, list) or not endpoints:
            self.problem(doc, "spec.endpoints: a non-empty list")
            return
        for where, ep in self.each_mapping(doc, endpoints, "spec.endpoints", SERVICEMONITOR_ENDPOINT):
            if not isinstance(ep.get("port"), str):
                self.problem(doc, f"{where}.port: the name of a port of the Service")
            elif services and ep["port"] not in {p.get("name") for p in services[0]["spec"].get("ports") or []}:
                self.problem(doc, f"{where}.port {ep['port']}: {show(services[0])} has no port of that name")
            if not str(ep.get("path", "/metrics")).startswith("/"):
                self.problem(doc, f"{where}.path: starts with /")
            if ep.get("scheme", "http") not in {"http", "https"}:
                self.problem(doc, f"{where}.scheme: http or https")

    def each_mapping(self, doc, items, path, allowed):
        """Each mapping of the list `items` at `path`, with its own path; an item that is no
        mapping, or has a field outside `allowed`, is a problem."""
        for i, item in enumerate(items):
            where = f"{path}[{i}]"
            if not isinstance(item, dict):
                self.problem(doc, f"{where}: a mapping")
                continue
            extra = set(item) - allowed
            if extra:
                self.problem(doc, f"{where}: unknown fields {sorted(extra)}")
            yield where, item

    def check_prometheusrule(self, doc):
        if doc.get("apiVersion") != "monitoring.coreos.com/v1":
            self.problem(doc, f"apiVersion {doc.get('apiVersion')}: monitoring.coreos.com/v1")
        extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
        if extra:
            self.problem(doc, f"unknown fields {sorted(extra)}")
        if not (doc.get("metadata") or {}).get("name"):
            self.problem(doc, "metadata.name is missing")
        spec = doc.get("spec") or {}
        extra = set(spec) - {"groups"}
        if extra:
            self.problem(doc, f"spec: unknown fields {sorted(extra)}")
        groups = spec.get("groups")
        if not isinstance(groups, list) or not groups:
            self.problem(doc, "spec.groups: a non-empty list")
            return
        names = set()
        for where, group in self.each_mapping(doc, groups, "spec.groups", PROMETHEUSRULE_GROUP):
            name = group.get("name")
            if not isinstance(name, str) or not name:
                self.problem(doc, f"{where}.name: a non-empty string")
            elif name in names:
                self.problem(doc, f"{where}.name {name}: another group has it")
            names.add(name)
            if "interval" in group:
                self.check_duration(doc, f"{where}.interval", group["interval"])
            rules = group.get("rules")
            if not isinstance(rules, list) or not rules:
                self.problem(doc, f"{where}.rules: a non-empty list")
                continue
            for rule_at, rule in self.each_mapping(doc, rules, f"{where}.rules", PROMETHEUSRULE_RULE):
                self.check_rule(doc, rule_at, rule)

    def check_rule(self, doc, where, rule):
        if ("alert" in rule) == ("record" in rule):
            self.problem(doc, f"{where}: one of alert and record")
        name = rule.get("alert", rule.get("record"))
        if not isinstance(name, str) or not name:
            self.problem(doc, f"{where}: the alert's or record's name, a non-empty string")
        if not isinstance(rule.get("expr"), (str, int)) or not str(rule.get("expr")).strip():
            self.problem(doc, f"{where} ({name}).expr: a PromQL expression")
        if "record" in rule:
            for field in ("for", "keep_firing_for", "annotations"):
                if field in rule:
                    self.problem(doc, f"{where} ({name}).{field}: only alerts have it")
        for field in ("for", "keep_firing_for"):
            if field in rule:
                self.check_duration(doc, f"{where} ({name}).{field}", rule[field])
        for field in ("labels", "annotations"):
            values = rule.get(field, {})
            if not isinstance(values, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in values.items()
            ):
                self.problem(doc, f"{where} ({name}).{field}: a mapping of strings to strings")

    def check_duration(self, doc, where, value):
        if not isinstance(value, str) or not value or not DURATION.match(value):
            self.problem(doc, f"{where}: {value!r} is not a Prometheus duration (5m, 1h30m)")

    def check_pod(self, doc, spec):
        namespace = doc["metadata"].get("namespace")
        pod_sc = spec.get("securityContext") or {}
        if spec.get("automountServiceAccountToken") is not False:
            self.problem(doc, "automountServiceAccountToken: false (Sluice does not call the Kubernetes API)")
        account = spec.get("serviceAccountName")
        if account and not self.find("ServiceAccount", account, namespace):
            self.problem(doc, f"serviceAccountName {account}: no ServiceAccount in the build")
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(field):
                self.problem(doc, f"{field}: not allowed (restricted Pod Security Standard)")
        if pod_sc.get("runAsUser") == 0:
            self.problem(doc, "securityContext.runAsUser 0 (restricted Pod Security Standard)")
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        claims = {t["metadata"]["name"] for t in (doc.get("spec") or {}).get("volumeClaimTemplates") or []}
        for v in volumes.values():
            kinds = set(v) - {"name"}
            if not kinds <= RESTRICTED_VOLUMES:
                self.problem(doc, f"volume {v['name']}: {sorted(kinds)} (restricted Pod Security Standard)")
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                if not self.find("PersistentVolumeClaim", claim, namespace):
                    self.problem(doc, f"volume {v['name']}: no PersistentVolumeClaim {claim}")
            if "secret" in v:
                self.check_secret(doc, namespace, v["secret"].get("secretName"), None, v["secret"].get("optional"))
        for ref in configmap_refs(spec):
            key = ref.get("key")
            cm = self.find("ConfigMap", ref.get("name"), namespace)
            if cm is None and not ref.get("optional"):
                self.problem(doc, f"ConfigMap {ref.get('name')}: not in the build")
            elif cm is not None and key and key not in (cm.get("data") or {}) and not ref.get("optional"):
                self.problem(doc, f"ConfigMap {ref.get('name')} has no key {key}")
        for c in containers(spec):
            self.check_container(doc, c, volumes, claims, pod_sc, namespace)

    def check_container(self, doc, c, volumes, claims, pod_sc, namespace):
        name = c.get("name")
        where = f"container {name}"
        sc = c.get("securityContext") or {}
        merged = {**pod_sc, **sc}
        if merged.get("runAsNonRoot") is not True:
            self.problem(doc, f"{where}: runAsNonRoot: true (restricted Pod Security Standard)")
        if sc.get("runAsUser") == 0:
            self.problem(doc, f"{where}: runAsUser 0 (restricted Pod Security Standard)")
        if (merged.get("seccompProfile") or {}).get("type") not in {"RuntimeDefault", "Localhost"}:
            self.problem(doc, f"{where}: seccompProfile RuntimeDefault (restricted Pod Security Standard)")
        if sc.get("allowPrivilegeEscalation") is not False:
            self.problem(doc, f"{where}: allowPrivilegeEscalation: false (restricted Pod Security Standard)")
        if sc.get("privileged"):
            self.problem(doc, f"{where}: privileged (restricted Pod Security Standard)")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            self.problem(doc, f"{where}: capabilities.drop [ALL] (restricted Pod Security Standard)")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            self.problem(doc, f"{where}: capabilities.add (restricted Pod Security Standard)")
        if sc.get("readOnlyRootFilesystem") is not True:
            self.problem(doc, f"{where}: readOnlyRootFilesystem: true")
        resources = c.get("resources") or {}
        for part, keys in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
            for key in keys:
                if key not in (resources.get(part) or {}):
                    self.problem(doc, f"{where}: resources.{part}.{key} is not set")
        image = c.get("image", "")
        _, tag, digest = split_image(image)
        if not digest and (not tag or tag == "latest"):
            self.problem(doc, f"{where}: image {image!r}: pin a version tag or digest")
        ports = {p.get("name") for p in c.get("ports") or [] if p.get("name")}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
            if isinstance(port, str) and port not in ports:
                self.problem(doc, f"{where}: {probe} port {port}: no container port of that name")
        for mount in c.get("volumeMounts") or []:
            if mount["name"] not in volumes and mount["name"] not in claims:
                self.problem(doc, f"{where}: volumeMount {mount['name']}: no such volume or claim template")
        defined = set()
        env = {}
        for e in c.get("env") or []:
            value = e.get("value", "")
            start = 0
            while (i := value.find("$(", start)) >= 0:
                end = value.find(")", i)
                if end < 0:
                    break
                ref = value[i + 2 : end]
                if ref not in defined:
                    self.problem(doc, f"{where}: env {e['name']} uses $({ref}), not defined before it")
                start = end + 1
            secret = (e.get("valueFrom") or {}).get("secretKeyRef")
            if secret:
                self.check_secret(doc, namespace, secret.get("name"), secret.get("key"), secret.get("optional"))
            defined.add(e["name"])
            env[e["name"]] = e
        for e in c.get("envFrom") or []:
            if "secretRef" in e:
                self.check_secret(doc, namespace, e["secretRef"].get("name"), None, e["secretRef"].get("optional"))
        if "SLUICE_CONFIG" in env:
            self.check_settings(doc, where, c, env, volumes, namespace)

    def check_secret(self, doc, namespace, name, key, optional):
        secret = self.find("Secret", name, namespace)
        if secret is None:
            secret = self.examples.get(name)
            if secret is None:
                if not optional:
                    self.problem(doc, f"Secret {name}: neither in the build nor in a *.example.yaml")
                return
        data = {**(secret.get("data") or {}), **(secret.get("stringData") or {})}
        if key and key not in data:
            self.problem(doc, f"Secret {name} has no key {key} (its example lists {sorted(data)})")

    def check_settings(self, doc, where, c, env, volumes, namespace):
        """SLUICE_CONFIG names a file of a mounted ConfigMap that parses, and whose
        ${env:NAME} values this container sets."""
        path = PurePosixPath(env["SLUICE_CONFIG"].get("value", ""))
        for mount in c.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            if "configMap" in volume and path.parent == PurePosixPath(mount["mountPath"]):
                break
        else:
            self.problem(doc, f"{where}: SLUICE_CONFIG {path}: no ConfigMap mounted at {path.parent}")
            return
        cm = self.find("ConfigMap", volume["configMap"]["name"], namespace)
        text = ((cm or {}).get("data") or {}).get(path.name)
        if text is None:
            self.problem(doc, f"{where}: SLUICE_CONFIG {path}: the ConfigMap has no key {path.name}")
            return
        try:
            settings = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            self.problem(doc, f"{where}: {path.name}: {e}")
            return

        def strings(node):
            if isinstance(node, dict):
                for v in node.values():
                    yield from strings(v)
            elif isinstance(node, list):
                for v in node:
                    yield from strings(v)
            elif isinstance(node, str):
                yield node

        for value in strings(settings):
            if value.startswith("${env:") and value.endswith("}"):
                var = value[len("${env:") : -1]
                if var not in env:
                    self.problem(doc, f"{where}: {path.name} reads ${{env:{var}}}, which the container does not set")

    def check_workloads(self):
        for doc in self.objects:
            if doc["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}:
                selector = (doc["spec"].get("selector") or {}).get("matchLabels") or {}
                if not matches(selector, pod_labels(doc)):
                    self.problem(doc, f"spec.selector {selector} does not match the pod template's labels")
            if doc["kind"] == "StatefulSet":
                namespace = doc["metadata"].get("namespace")
                service = self.find("Service", doc["spec"].get("serviceName"), namespace)
                if service is None or service["spec"].get("clusterIP") != "None":
                    self.problem(doc, f"spec.serviceName {doc['spec'].get('serviceName')}: no headless Service of that name")
                elif not matches(service["spec"].get("selector") or {}, pod_labels(doc)):
                    self.problem(doc, f"Service {service['metadata']['name']} does not select its pods")
            for spec in pod_specs(doc):
                base_images = {
                    c.get("image")
                    for c in containers(spec)
                    if split_image(c.get("image", ""))[0].rpartition("/")[2] == "sluice"
                }
                if self.crate_version and base_images - {f"sluice:{self.crate_version}"}:
                    self.problem(
                        doc,
                        f"images {sorted(base_images)}: the base pins sluice:{self.crate_version}, "
                        "the version in processor/Cargo.toml",
                    )

    def selected(self, selector, namespace):
        return [
            d
            for d in self.objects
            if d["kind"] in WORKLOADS
            and d["metadata"].get("namespace") == namespace
            and matches(selector, pod_labels(d))
        ]

    def check_services(self):
        for service in self.of_kind("Service"):
            namespace = service["metadata"].get("namespace")
            workloads = self.selected(service["spec"].get("selector") or {}, namespace)
            if not workloads:
                self.problem(service, f"spec.selector {service['spec'].get('selector')} selects no pods in the build")
                continue
            for port in service["spec"].get("ports") or []:
                target = port.get("targetPort", port.get("port"))
                for w in workloads:
                    for spec in pod_specs(w):
                        ports = [p for c in spec.get("containers") or [] for p in c.get("ports") or []]
                        if isinstance(target, str):
                            ok = any(p.get("name") == target for p in ports)
                        else:
                            ok = any(p.get("containerPort") == target for p in ports)
                        if not ok:
                            self.problem(service, f"targetPort {target}: {show(w)}'s containers have no such port")

    def check_pdbs(self):
        for pdb in self.of_kind("PodDisruptionBudget"):
            selector = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
            workloads = self.selected(selector, pdb["metadata"].get("namespace"))
            if len(workloads) != 1:
                self.problem(pdb, f"spec.selector {selector} matches {[show(w) for w in workloads]}: one workload")


def crate_version(repo):
    with open(repo / "processor" / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["version"]


def main():
    here = Path(__file__).resolve().parent
    k8s = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else here / "k8s"
    repo = here.parent
    version = crate_version(repo)
    problems = []

    examples = {}
    for path in sorted(k8s.rglob("*.example.yaml")):
        for doc in load_yaml_documents(path):
            for v in K8S_VERSIONS:
                errors = schema_errors(doc, v)
                if errors is None:
                    errors = [f"no schema for {doc.get('apiVersion')} {doc.get('kind')}"]
                for e in errors:
                    problems.append(f"{path.relative_to(repo)}: {show(doc)}: Kubernetes {v} schema: {e}")
            if doc.get("kind") == "Secret":
                examples[doc["metadata"]["name"]] = doc
        print(f"example {path.relative_to(repo)}: checked", flush=True)

    def check(label, objects, pinned):
        found = Checker(label, objects, examples, pinned).run()
        problems.extend(found)
        kinds = ", ".join(show(o) for o in objects)
        print(f"render {label}: {len(objects)} objects ({kinds}): {len(found)} problems", flush=True)

    roots = sorted({p.parent for name in KUSTOMIZATION_NAMES for p in k8s.rglob(name)})
    if not roots:
        problems.append(f"{k8s}: no kustomization")
    rendered = {}
    for root in roots:
        label = str(root.relative_to(repo))
        try:
            objects = build(root)
        except RenderError as e:
            problems.append(f"{label}: {e}")
            print(f"render {label}: FAILED", flush=True)
            continue
        rendered[root] = objects
        # The base itself (no image transformation) pins the crate's version.
        is_overlay = bool(yaml.safe_load(kustomization_file(root).read_text()).get("images"))
        check(label, objects, None if is_overlay else version)

    # The chart, with its defaults (the base's twin, pinned to the crate's version as the
    # base is) and with the production example (the production overlay's twin).
    chart = here / "helm" / "sluice"
    production = k8s / "overlays" / "production"
    cases = [
        ("defaults", [], k8s / "base", version),
        (
            "examples/production.yaml",
            [
                "-f", str(chart / "examples" / "production.yaml"),
                "--set-file", f"settings={production / 'sluice.toml'}",
                "--set-file", f"alertRoutes={production / 'alert-routes.yaml'}",
            ],
            production,
            None,
        ),
    ]
    for name, args, twin, pinned in cases:
        label = f"{chart.relative_to(repo)} ({name})"
        try:
            objects = render_chart(chart, args)
        except RenderError as e:
            problems.append(f"{label}: {e}")
            print(f"render {label}: FAILED", flush=True)
            continue
        check(label, objects, pinned)
        if twin in rendered:
            found = twin_problems(f"{label} against {twin.relative_to(repo)}", rendered[twin], objects)
            problems.extend(found)
            print(f"compare {label} with {twin.relative_to(repo)}: {len(found)} differences", flush=True)

    if problems:
        print(f"\n{len(problems)} problems in the Kubernetes manifests:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(
        f"Kubernetes manifests: {len(roots)} kustomizations and the Helm chart ({len(cases)} value sets, "
        "each the same objects as its kustomize twin) rendered; schemas of Kubernetes "
        f"{' and '.join(K8S_VERSIONS)} (strict), references, pod security: no problems"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
