"""Writes the gateway configuration and policy of every rendered manifest file to disk, so that
`countersign check` can validate what the pods would load.

For each OUT/manifests/NAME.yaml holding a ConfigMap with `gateway.yaml`, writes
WORK/NAME/gateway.yaml and WORK/NAME/policy.yaml (the policy ConfigMap in the same file; a
file whose policy ConfigMap is managed elsewhere gets none), WORK/NAME/signing-keys when the
file has the keyring Secret (the chart's generated key), and prints WORK/NAME. A `redis:`
section without `url` gets one, as COUNTERSIGN_REDIS_URL gives it in the pod; the approval
page's secret files get stand-ins.

usage: extract_configs.py MANIFESTS_DIR WORK
"""

import base64
import os
import pathlib
import sys

import yaml

manifests, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for path in sorted(manifests.glob("*.yaml")):
    configs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "ConfigMap"]
    gateway = next((c["data"]["gateway.yaml"] for c in configs if "gateway.yaml" in c.get("data", {})), None)
    if gateway is None:
        continue
    config = yaml.safe_load(gateway)
    if "redis" in config and "url" not in config["redis"]:
        config["redis"]["url"] = "redis://redis.invalid:6379"
    out = work / path.stem
    out.mkdir(parents=True, exist_ok=True)
    # The approval page's secrets (link key, OIDC client secret, webhook keys) are files the pod
    # mounts from Secrets: point them at stand-ins, 32 random bytes in base64 each.
    def stand_in(section):
        for key, value in list(section.items()) if isinstance(section, dict) else []:
            if key.endswith("_file") and isinstance(value, str):
                stand = out / f"stand-in-{pathlib.PurePosixPath(value).name}"
                stand.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
                section[key] = str(stand)
            elif isinstance(value, dict):
                stand_in(value)
            elif isinstance(value, list):
                for item in value:
                    stand_in(item)
    stand_in(config.get("approvals", {}))
    (out / "gateway.yaml").write_text(yaml.safe_dump(config))
    policy_name = pathlib.PurePosixPath(config.get("policy", "policy.yaml")).name
    policy = next((c["data"][policy_name] for c in configs if policy_name in c.get("data", {})), None)
    if policy is not None:
        (out / "policy.yaml").write_text(policy)
    # The keyring the chart generates, so its format is checked too.
    keys_name = pathlib.PurePosixPath(config.get("signing_keys_file", "")).name
    for secret in yaml.safe_load_all(path.read_text()):
        if secret and secret.get("kind") == "Secret" and keys_name in secret.get("data", {}):
            (out / "signing-keys").write_bytes(base64.b64decode(secret["data"][keys_name]))
    print(out)
