"""CustomResourceDefinitions (F40): reading them from files, their status, unserving a version.

A CRD becomes a :class:`~.registry.Resource` through :func:`~.registry.resource_from_crd`; this
module holds what the cluster does around that.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from dispatcher_sandbox.fake_apiserver.objects import Obj
from dispatcher_sandbox.fake_apiserver.registry import resource_from_crd
from dispatcher_sandbox.fake_apiserver.state import ClusterState

CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


def load_crd_documents(path: Path) -> list[Obj]:
    """Every CustomResourceDefinition in a YAML file, or in the ``*.yaml`` files of a folder."""
    files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if path.is_dir() else [path]
    crds: list[Obj] = []
    for file in files:
        # libyaml when present: the Kueue CRD files take ~1 s to parse in pure Python.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for doc in yaml.load_all(file.read_text(), Loader=loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


def crd_status(crd: Obj, now: str) -> Obj:
    """The status of an established CRD: names accepted, the storage versions."""
    names = dict((crd.get("spec") or {}).get("names") or {})
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": [
            v["name"] for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")
        ],
    }


def unserve_version(cluster: ClusterState, group: str, version: str) -> list[str]:
    """Stop serving ``version`` of the custom resources of ``group`` that serve another version
    too, as an update of each CRD setting that version ``served: false`` would; returns the
    plurals changed (see :meth:`.server.FakeCluster.unserve_version`)."""
    changed: list[str] = []
    for resource in cluster.registry.all():
        if resource.builtin or resource.group != group:
            continue
        if version not in resource.versions or len(resource.versions) < 2:
            continue
        stored = cluster.store.get(CRDS, ("", resource.label))
        if stored is None:
            resource.versions = [v for v in resource.versions if v != version]
            resource.schemas.pop(version, None)
        else:
            crd = copy.deepcopy(stored)
            for item in (crd.get("spec") or {}).get("versions") or []:
                if item.get("name") == version:
                    item["served"] = False
            meta = crd["metadata"]
            meta["generation"] = int(meta.get("generation") or 1) + 1
            cluster.registry.add(resource_from_crd(crd))
            cluster.store.write(CRDS, ("", resource.label), crd, "MODIFIED")
        changed.append(resource.plural)
    return changed
