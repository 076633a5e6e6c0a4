#!/usr/bin/env python3
"""The CRD (what the API server admits) and `dlbench validate` (what the operator accepts) agree.

Every probe is a pair of BenchmarkRuns on either side of one rule or bound: the CRD, evaluated
by tests/crd/evaluate_crd.mjs with a real CEL implementation and a real JSON-schema validator,
must admit the first and refuse the second, and `dlbench validate` must give the same two
verdicts. So each rule is hit from both sides, and a rule changed on either side alone fails
here. The examples in crds/examples must get the same verdict from both. The YAML probes are
read by the real kubectl (client-side dry run against the test API server): the CRD judges
what kubectl would send, dlbench judges the same file.

Differences that remain, on purpose:
- Lengths: the CRD's maxLength counts characters, dlbench counts bytes; they differ only past
  ASCII, where dlbench is stricter (no probe crosses it).
- env[].valueFrom: both require exactly one source; what the source refers to is checked by
  the API server when the operator creates the pod, not when the run is applied.
- status: a status in an applied file is dropped by the API server (the status subresource);
  `dlbench validate` checks it, because dlbench report reads status files with it.
- The CEL cost budget and the API server's request-size limit (3 MiB) are not modelled; dlbench
  refuses files over 8 MiB.

Usage: agreement_test.py DLBENCH NODE_MODULES_DIR [KUBECTL]
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

BASE = {
    "apiVersion": "dlbench.io/v1alpha1",
    "kind": "BenchmarkRun",
    "metadata": {"name": "probe"},
    "spec": {"model": "resnet50", "matrix": {"batchSizePerDevice": [8], "precision": ["fp32"]}},
}


def with_(path, value):
    """BASE with the value at a dotted path set (None deletes it)."""
    obj = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = obj
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return obj


def prefix(length):
    """A DNS subdomain of exactly `length` characters (labels of 63)."""
    labels, left = [], length
    while left > 0:
        take = min(63, left)
        if left - take == 1:  # never leave a lone dot
            take -= 1
        labels.append("a" * take)
        left -= take + 1
    text = ".".join(labels)
    assert len(text) == length, (len(text), length)
    return text


def cases(n, start=1):
    return [{"nodes": 1, "gpusPerNode": 1, "batchSizePerDevice": b, "precision": "fp32"} for b in range(start, start + n)]


def tolerations(items):
    return with_("spec.worker", {"tolerations": items})


def env(items):
    return with_("spec.worker", {"env": items})


def overrides(*entries, **spec_fields):
    """BASE with spec.podTemplateOverrides (and other spec fields, such as engine or worker)."""
    obj = copy.deepcopy(BASE)
    obj["spec"]["podTemplateOverrides"] = list(entries)
    obj["spec"].update(spec_fields)
    return obj


def pod(targets=("worker",), metadata=None, **spec):
    """One podTemplateOverrides entry."""
    entry = {"targetJobs": [{"name": t} for t in targets]}
    if metadata is not None:
        entry["metadata"] = metadata
    if spec:
        entry["spec"] = spec
    return entry


def volume(name):
    return {"name": name, "emptyDir": {}}


def worker(**fields):
    return with_("spec.worker", fields)


PROBES = [
    # metadata: the CRD's name rule, and ObjectMeta's own rules the API server applies
    ("metadata.name length", with_("metadata.name", "a" * 63), with_("metadata.name", "a" * 64)),
    ("metadata.name syntax", with_("metadata.name", "a-b0"), with_("metadata.name", "a-")),
    ("metadata.name case", with_("metadata.name", "ab"), with_("metadata.name", "Ab")),
    ("metadata.namespace", with_("metadata.namespace", "team-a"), with_("metadata.namespace", "Team")),
    ("metadata unknown field", with_("metadata.generateName", "probe-"), with_("metadata.owner", "me")),
    ("label key", with_("metadata.labels", {"app.kubernetes.io/name": "x"}), with_("metadata.labels", {"bad key": "x"})),
    ("label key prefix length", with_("metadata.labels", {prefix(253) + "/k": "x"}),
     with_("metadata.labels", {prefix(254) + "/k": "x"})),
    ("label value length", with_("metadata.labels", {"k": "v" * 63}), with_("metadata.labels", {"k": "v" * 64})),
    ("label value syntax", with_("metadata.labels", {"k": "a.b_c-d"}), with_("metadata.labels", {"k": "a b"})),
    ("annotation key", with_("metadata.annotations", {"example.com/note": "free text, any: thing"}),
     with_("metadata.annotations", {"-note": "x"})),
    # spec fields
    ("spec unknown field", BASE, with_("spec.modle", "resnet50")),
    ("spec.model enum", with_("spec.model", "alexnet"), with_("spec.model", "resnet18")),
    ("spec.model required", BASE, with_("spec.model", None)),
    ("inception_v3 needs 299-pixel images",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "inception_v3", "data": {"imageSize": 299}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "inception_v3", "data": {"imageSize": 298}}}))),
    ("inception_v3 and the default image size", with_("spec.data.imageSize", 224), with_("spec.model", "inception_v3")),
    ("inception_v3 needs 299 on both sides",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "inception_v3",
                                             "data": {"imageHeight": 299, "imageWidth": 320}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "inception_v3",
                                             "data": {"imageHeight": 320, "imageWidth": 298}}}))),
    ("alexnet needs 63-pixel images",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "alexnet", "data": {"imageSize": 63}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "alexnet", "data": {"imageSize": 62}}}))),
    ("alexnet needs 63 on both sides",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "alexnet",
                                             "data": {"imageHeight": 63, "imageWidth": 64}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "alexnet",
                                             "data": {"imageHeight": 64, "imageWidth": 32}}}))),
    ("deeplabv3plus takes no imagefolder",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "deeplabv3plus",
                                             "data": {"source": "synthetic", "imageHeight": 512, "imageWidth": 1024}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "deeplabv3plus",
                                             "data": {"source": "imagefolder", "path": "/data/train"}}}))),
    ("deeplabv3plus takes cityscapes, height x width",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "deeplabv3plus",
                                             "data": {"source": "cityscapes", "path": "/data/cityscapes",
                                                      "imageHeight": 512, "imageWidth": 1024,
                                                      "volume": {"persistentVolumeClaim": {"claimName": "streets"}}}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "deeplabv3plus",
                                             "data": {"source": "cityscapes", "imageHeight": 512, "imageWidth": 1024}}}))),
    ("cityscapes is for deeplabv3plus only",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "deeplabv3plus",
                                             "data": {"source": "cityscapes", "path": "/data/cityscapes"}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "vgg16",
                                             "data": {"source": "cityscapes", "path": "/data/cityscapes"}}}))),
    ("cityscapes is no classifier's data, by default resnet50's",
     with_("spec.data", {"source": "imagefolder", "path": "/data/train"}),
     with_("spec.data", {"source": "cityscapes", "path": "/data/cityscapes"})),
    ("bert-base takes no imagefolder",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"source": "synthetic"}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base",
                                             "data": {"source": "imagefolder", "path": "/data/train"}}}))),
    ("bert-base takes its pretraining shards, from a volume too",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base",
                                             "data": {"source": "bertpretraining", "path": "/data/shards",
                                                      "sequenceLength": 128,
                                                      "volume": {"persistentVolumeClaim": {"claimName": "wiki"}}}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base",
                                             "data": {"source": "bertpretraining", "sequenceLength": 128}}}))),
    ("bertpretraining is bert-base's only",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base",
                                             "data": {"source": "bertpretraining", "path": "/data/shards"}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "deeplabv3plus",
                                             "data": {"source": "bertpretraining", "path": "/data/shards"}}}))),
    ("bertpretraining is no classifier's data, by default resnet50's",
     with_("spec.data", {"source": "imagefolder", "path": "/data/train"}),
     with_("spec.data", {"source": "bertpretraining", "path": "/data/shards"})),
    ("bert-base takes no cityscapes",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"source": "synthetic"}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base",
                                             "data": {"source": "cityscapes", "path": "/data/cityscapes"}}}))),
    ("data.sequenceLength only for bert-base",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"sequenceLength": 512}}})),
     with_("spec.data", {"sequenceLength": 128})),
    # imageSize's default is written into every BenchmarkRun, so 224 passes for bert-base too.
    ("bert-base takes no image size",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"imageSize": 224}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"imageSize": 300}}}))),
    ("bert-base takes no image height and width",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"source": "synthetic"}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base",
                                             "data": {"imageHeight": 64, "imageWidth": 96}}}))),
    ("data.sequenceLength bounds",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"sequenceLength": 8}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "model": "bert-base", "data": {"sequenceLength": 513}}}))),
    ("optimizer.name enum", with_("spec.optimizer", {"name": "lamb", "learningRate": 0.0001}),
     with_("spec.optimizer", {"name": "adagrad"})),
    ("data.imageHeight with imageWidth", with_("spec.data", {"imageHeight": 512, "imageWidth": 1024}),
     with_("spec.data", {"imageHeight": 512})),
    ("data.imageWidth with imageHeight", with_("spec.data", {"imageHeight": 64, "imageWidth": 96}),
     with_("spec.data", {"imageWidth": 96})),
    ("data.imageWidth maximum", with_("spec.data", {"imageHeight": 64, "imageWidth": 2048}),
     with_("spec.data", {"imageHeight": 64, "imageWidth": 2049})),
    ("data.imageHeight minimum", with_("spec.data", {"imageHeight": 32, "imageWidth": 64}),
     with_("spec.data", {"imageHeight": 31, "imageWidth": 64})),
    ("imagefolder crops are square",
     with_("spec.data", {"source": "imagefolder", "path": "/data/train", "imageHeight": 96, "imageWidth": 96}),
     with_("spec.data", {"source": "imagefolder", "path": "/data/train", "imageHeight": 96, "imageWidth": 128})),
    ("spec.command required with command",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "engine": "command", "command": ["python3", "train.py"]}})),
     with_("spec.engine", "command")),
    ("spec.command only with command", BASE, with_("spec.command", ["python3"])),
    ("preflight.selfTest only with native",
     with_("spec.preflight", {"selfTest": True}),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "engine": "command", "command": ["python3", "train.py"],
                                             "preflight": {"selfTest": True}}}))),
    ("preflight.selfTest type", with_("spec.preflight", {"selfTest": False}), with_("spec.preflight", {"selfTest": "yes"})),
    ("cudaGraph only with native",
     with_("spec.cudaGraph", True),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "engine": "command", "command": ["python3", "train.py"],
                                             "cudaGraph": True}}))),
    ("cudaGraph type", with_("spec.cudaGraph", False), with_("spec.cudaGraph", "yes")),
    ("cudaGraph one node a case",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "cudaGraph": True,
                                             "matrix": {**BASE["spec"]["matrix"], "nodes": [1]}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "cudaGraph": True,
                                             "matrix": {**BASE["spec"]["matrix"], "nodes": [1, 2]}}}))),
    ("cudaGraph one GPU a case",
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "cudaGraph": False,
                                             "matrix": {**BASE["spec"]["matrix"], "gpusPerNode": [8]}}})),
     json.loads(json.dumps({**BASE, "spec": {**BASE["spec"], "cudaGraph": True,
                                             "matrix": {**BASE["spec"]["matrix"], "gpusPerNode": [8]}}}))),
    ("cudaGraph one device a listed case",
     json.loads(json.dumps({**BASE, "spec": {"model": "resnet50", "cudaGraph": True,
                                             "cases": [{"batchSizePerDevice": 8, "precision": "amp"}]}})),
     json.loads(json.dumps({**BASE, "spec": {"model": "resnet50", "cudaGraph": True,
                                             "cases": [{"batchSizePerDevice": 8, "precision": "amp"},
                                                       {"nodes": 1, "gpusPerNode": 2, "batchSizePerDevice": 8,
                                                        "precision": "amp"}]}}))),
    ("matrix xor cases", BASE, with_("spec.cases", cases(1))),
    ("matrix or cases", BASE, with_("spec.matrix", None)),
    ("data.imageSize minimum", with_("spec.data", {"imageSize": 32}), with_("spec.data", {"imageSize": 31})),
    ("data.imageSize maximum", with_("spec.data", {"imageSize": 2048}), with_("spec.data", {"imageSize": 2049})),
    ("data.imageSize integral float", with_("spec.data", {"imageSize": 64.0}), with_("spec.data", {"imageSize": 64.5})),
    ("data.imageSize type", with_("spec.data", {"imageSize": 64}), with_("spec.data", {"imageSize": "64"})),
    ("data.source enum", with_("spec.data", {"source": "imagefolder", "path": "/data"}),
     with_("spec.data", {"source": "tfrecord"})),
    ("data.path required with imagefolder", with_("spec.data", {"source": "imagefolder", "path": "/data/train"}),
     with_("spec.data", {"source": "imagefolder"})),
    ("data.path only with imagefolder", with_("spec.data", {"source": "synthetic"}),
     with_("spec.data", {"source": "synthetic", "path": "/data"})),
    ("data.volume only with imagefolder",
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"hostPath": {"path": "/srv/imagenet"}}}),
     with_("spec.data", {"volume": {"hostPath": {"path": "/srv/imagenet"}}})),
    ("data.path absolute", with_("spec.data", {"source": "imagefolder", "path": "/d"}),
     with_("spec.data", {"source": "imagefolder", "path": "data/train"})),
    ("data.path not root", with_("spec.data", {"source": "imagefolder", "path": "/data/"}),
     with_("spec.data", {"source": "imagefolder", "path": "/"})),
    ("data.path backsteps", with_("spec.data", {"source": "imagefolder", "path": "/data/..x/a"}),
     with_("spec.data", {"source": "imagefolder", "path": "/data/../etc"})),
    ("data.path outside /dlbench", with_("spec.data", {"source": "imagefolder", "path": "/dlbenchdata"}),
     with_("spec.data", {"source": "imagefolder", "path": "/dlbench/data"})),
    ("data.path length", with_("spec.data", {"source": "imagefolder", "path": "/" + "d" * 4095}),
     with_("spec.data", {"source": "imagefolder", "path": "/" + "d" * 4096})),
    ("data.volume exactly one source",
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"persistentVolumeClaim": {"claimName": "imagenet"}}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
         "persistentVolumeClaim": {"claimName": "imagenet"}, "hostPath": {"path": "/srv"}}})),
    ("data.volume a source", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "nfs": {"server": "10.0.0.5", "path": "/exports/imagenet"}, "subPath": "train"}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"subPath": "train"}})),
    ("data.volume claimName", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "persistentVolumeClaim": {"claimName": "image-net.v2"}}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"persistentVolumeClaim": {"claimName": "ImageNet"}}})),
    ("data.volume hostPath absolute", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "hostPath": {"path": "/srv"}}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"hostPath": {"path": "srv"}}})),
    ("data.volume nfs server required", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "nfs": {"server": "nfs", "path": "/x"}}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"nfs": {"path": "/x"}}})),
    ("data.volume subPath relative", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "hostPath": {"path": "/srv"}, "subPath": "a/b"}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"hostPath": {"path": "/srv"}, "subPath": "/a"}})),
    ("data.volume subPath backsteps", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "hostPath": {"path": "/srv"}, "subPath": "a..b"}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"hostPath": {"path": "/srv"}, "subPath": "a/../b"}})),
    ("data.volume unknown field", with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {
        "hostPath": {"path": "/srv"}}}),
     with_("spec.data", {"source": "imagefolder", "path": "/data", "volume": {"hostPath": {"path": "/srv"}, "emptyDir": {}}})),
    ("data.decodeThreads", with_("spec.data", {"decodeThreads": 256}), with_("spec.data", {"decodeThreads": 257})),
    ("data.decodeThreads minimum", with_("spec.data", {"decodeThreads": 1}), with_("spec.data", {"decodeThreads": 0})),
    ("data.prefetchBatches", with_("spec.data", {"prefetchBatches": 64}), with_("spec.data", {"prefetchBatches": 65})),
    ("data unknown field", with_("spec.data", {"imageSize": 64}), with_("spec.data", {"imageSise": 64})),
    ("matrix.nodes maximum", with_("spec.matrix.nodes", [1024]), with_("spec.matrix.nodes", [1025])),
    ("matrix.nodes minimum", with_("spec.matrix.nodes", [1]), with_("spec.matrix.nodes", [0])),
    ("matrix.nodes unique", with_("spec.matrix.nodes", [1, 2]), with_("spec.matrix.nodes", [2, 2])),
    ("matrix.nodes minItems", with_("spec.matrix.nodes", [1]), with_("spec.matrix.nodes", [])),
    ("matrix.nodes maxItems", with_("spec.matrix.nodes", list(range(1, 33))), with_("spec.matrix.nodes", list(range(1, 34)))),
    ("matrix.gpusPerNode maximum", with_("spec.matrix.gpusPerNode", [64]), with_("spec.matrix.gpusPerNode", [65])),
    ("matrix.batchSizePerDevice maximum", with_("spec.matrix.batchSizePerDevice", [65536]),
     with_("spec.matrix.batchSizePerDevice", [65537])),
    ("matrix.batchSizePerDevice required", BASE, with_("spec.matrix.batchSizePerDevice", None)),
    ("matrix.precision enum", with_("spec.matrix.precision", ["bf16", "amp", "tf32"]), with_("spec.matrix.precision", ["fp8"])),
    ("matrix.precision unique", with_("spec.matrix.precision", ["fp32", "amp"]), with_("spec.matrix.precision", ["amp", "amp"])),
    ("matrix planned cases with its baselines",
     with_("spec.matrix", {"nodes": [1, 2, 3, 4, 5], "gpusPerNode": [1, 2, 3, 4, 5], "batchSizePerDevice": list(range(1, 11)),
                           "precision": ["fp32", "tf32", "amp", "bf16"]}),
     with_("spec.matrix", {"nodes": [2, 3, 4, 5, 6], "gpusPerNode": [1, 2, 3, 4, 5], "batchSizePerDevice": list(range(1, 11)),
                           "precision": ["fp32", "tf32", "amp", "bf16"]})),
    ("matrix planned cases, baselines added",
     with_("spec.matrix", {"nodes": [2, 3, 4, 5, 6], "gpusPerNode": [1, 2, 3, 4, 5, 6], "batchSizePerDevice": list(range(1, 9)),
                           "precision": ["fp32", "tf32", "amp", "bf16"]}),
     with_("spec.matrix", {"nodes": [2, 3, 4, 5, 6], "gpusPerNode": [1, 2, 3, 4, 5, 6, 7], "batchSizePerDevice": list(range(1, 9)),
                           "precision": ["fp32", "tf32", "amp", "bf16"]})),
    ("cases maxItems", {**with_("spec.matrix", None), "spec": {"model": "vgg16", "cases": cases(500)}},
     {**with_("spec.matrix", None), "spec": {"model": "vgg16", "cases": cases(501)}}),
    ("cases unique", {**BASE, "spec": {"model": "vgg16", "cases": cases(2)}},
     {**BASE, "spec": {"model": "vgg16", "cases": cases(1) + cases(1)}}),
    ("cases unique after defaults", {**BASE, "spec": {"model": "vgg16", "cases": [
        {"batchSizePerDevice": 8, "precision": "fp32"}, {"nodes": 2, "batchSizePerDevice": 8, "precision": "fp32"}]}},
     {**BASE, "spec": {"model": "vgg16", "cases": [
         {"batchSizePerDevice": 8, "precision": "fp32"}, {"nodes": 1, "batchSizePerDevice": 8, "precision": "fp32"}]}}),
    ("cases[].precision required", {**BASE, "spec": {"model": "vgg16", "cases": cases(1)}},
     {**BASE, "spec": {"model": "vgg16", "cases": [{"batchSizePerDevice": 8}]}}),
    ("methodology.warmupSteps", with_("spec.methodology", {"warmupSteps": 0}), with_("spec.methodology", {"warmupSteps": -1})),
    ("methodology.warmupSteps maximum", with_("spec.methodology", {"warmupSteps": 100000}),
     with_("spec.methodology", {"warmupSteps": 100001})),
    ("methodology.measureSteps", with_("spec.methodology", {"measureSteps": 1}), with_("spec.methodology", {"measureSteps": 0})),
    ("methodology.repeats", with_("spec.methodology", {"repeats": 1000}), with_("spec.methodology", {"repeats": 1001})),
    ("methodology.statistic", with_("spec.methodology", {"statistic": "mean"}), with_("spec.methodology", {"statistic": "mode"})),
    ("optimizer.learningRate exclusive minimum", with_("spec.optimizer", {"learningRate": 1e-9}),
     with_("spec.optimizer", {"learningRate": 0})),
    ("optimizer.learningRate maximum", with_("spec.optimizer", {"learningRate": 100}),
     with_("spec.optimizer", {"learningRate": 100.5})),
    ("optimizer.momentum exclusive maximum", with_("spec.optimizer", {"momentum": 0.999}), with_("spec.optimizer", {"momentum": 1})),
    ("optimizer.momentum minimum", with_("spec.optimizer", {"momentum": 0}), with_("spec.optimizer", {"momentum": -0.1})),
    ("optimizer.weightDecay maximum", with_("spec.optimizer", {"weightDecay": 1}), with_("spec.optimizer", {"weightDecay": 1.01})),
    ("optimizer.name", with_("spec.optimizer", {"name": "sgd"}), with_("spec.optimizer", {"name": "adam"})),
    ("limits.caseTimeoutSeconds", with_("spec.limits", {"caseTimeoutSeconds": 604800}),
     with_("spec.limits", {"caseTimeoutSeconds": 604801})),
    ("limits.backoffLimit maximum", with_("spec.limits", {"backoffLimit": 10}), with_("spec.limits", {"backoffLimit": 11})),
    ("limits.backoffLimit minimum", with_("spec.limits", {"backoffLimit": 0}), with_("spec.limits", {"backoffLimit": -1})),
    # worker: what Kubernetes would refuse on the pods the operator creates
    ("worker.image length", worker(image="r/" + "i" * 510), worker(image="r/" + "i" * 511)),
    ("worker.image whitespace", worker(image="registry.local/dlbench-worker:1"), worker(image="registry.local/w:1 ")),
    ("worker unknown field", worker(image="x"), worker(imag="x")),
    ("worker.gpuResource syntax", worker(gpuResource="amd.com/gpu"), worker(gpuResource="gpu")),
    ("worker.gpuResource kubernetes.io", worker(gpuResource="example.io/gpu"), worker(gpuResource="kubernetes.io/gpu")),
    ("worker.gpuResource kubernetes.io subdomain", worker(gpuResource="kubernetes.iox/gpu"),
     worker(gpuResource="node.kubernetes.io/gpu")),
    ("worker.gpuResource length", worker(gpuResource=prefix(251) + "/g"), worker(gpuResource=prefix(252) + "/g")),
    ("worker.rdma.resource", worker(rdma={"resource": "rdma/hca_shared_devices_a"}), worker(rdma={"resource": "rdma"})),
    ("worker.rdma.resource required", worker(rdma={"resource": "rdma/hca", "perNode": 2}), worker(rdma={"perNode": 2})),
    ("worker.rdma.perNode", worker(rdma={"resource": "rdma/hca", "perNode": 64}), worker(rdma={"resource": "rdma/hca", "perNode": 65})),
    ("worker.nodeSelector key", worker(nodeSelector={"kubernetes.io/hostname": "node-1"}), worker(nodeSelector={"a b": "x"})),
    ("worker.nodeSelector value", worker(nodeSelector={"k": "v" * 63}), worker(nodeSelector={"k": "v" * 64})),
    ("worker.nodeSelector value syntax", worker(nodeSelector={"k": ""}), worker(nodeSelector={"k": "x y"})),
    ("worker.nodeSelector entries", worker(nodeSelector={f"k{i}": "v" for i in range(64)}),
     worker(nodeSelector={f"k{i}": "v" for i in range(65)})),
    ("worker.nodeSelector value type", worker(nodeSelector={"k": "true"}), worker(nodeSelector={"k": True})),
    ("toleration key required with Equal", tolerations([{"key": "gpu", "operator": "Equal", "value": "yes"}]),
     tolerations([{"operator": "Equal", "value": "yes"}])),
    ("toleration empty key with Exists", tolerations([{"operator": "Exists"}]), tolerations([{"value": "x"}])),
    ("toleration value with Exists", tolerations([{"key": "gpu", "operator": "Exists"}]),
     tolerations([{"key": "gpu", "operator": "Exists", "value": "x"}])),
    ("toleration key syntax", tolerations([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
     tolerations([{"key": "nvidia.com/gpu!", "operator": "Exists"}])),
    ("toleration value length", tolerations([{"key": "k", "value": "v" * 63}]), tolerations([{"key": "k", "value": "v" * 64}])),
    ("toleration value characters", tolerations([{"key": "k", "value": "a.b_c-d"}]), tolerations([{"key": "k", "value": "a b"}])),
    ("tolerationSeconds needs NoExecute", tolerations([{"key": "k", "effect": "NoExecute", "tolerationSeconds": 30}]),
     tolerations([{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}])),
    ("tolerationSeconds minimum", tolerations([{"key": "k", "effect": "NoExecute", "tolerationSeconds": 0}]),
     tolerations([{"key": "k", "effect": "NoExecute", "tolerationSeconds": -1}])),
    ("toleration effect", tolerations([{"key": "k", "effect": ""}]), tolerations([{"key": "k", "effect": "Sometimes"}])),
    ("toleration unknown field", tolerations([{"key": "k"}]), tolerations([{"key": "k", "operater": "Exists"}])),
    ("tolerations maxItems", tolerations([{"key": f"k{i}"} for i in range(64)]), tolerations([{"key": f"k{i}"} for i in range(65)])),
    ("env name syntax", env([{"name": "a.b-c_D9", "value": "x"}]), env([{"name": "9A", "value": "x"}])),
    ("env name required", env([{"name": "A"}]), env([{"value": "x"}])),
    ("env name length", env([{"name": "A" * 256}]), env([{"name": "A" * 257}])),
    ("env value length", env([{"name": "A", "value": "x" * 32768}]), env([{"name": "A", "value": "x" * 32769}])),
    ("env value xor valueFrom", env([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
     env([{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])),
    ("env valueFrom exactly one source", env([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
     env([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "x"}}}])),
    ("env valueFrom empty", env([{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
     env([{"name": "A", "valueFrom": {}}])),
    ("env valueFrom unknown source", env([{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]),
     env([{"name": "A", "valueFrom": {"fileRef": {"path": "/x"}}}])),
    ("env maxItems", env([{"name": f"A{i}"} for i in range(256)]), env([{"name": f"A{i}"} for i in range(257)])),
    ("worker.schedulerName", worker(schedulerName="volcano"), worker(schedulerName="Volcano")),
    ("worker.priorityClassName", worker(priorityClassName="high-priority.team"), worker(priorityClassName="high_priority")),
    # spec.podTemplateOverrides: Trainer v2's shape, and what dlbench owns is refused
    ("overrides target", overrides(pod(("worker", "launcher"))), overrides(pod(("node",)))),
    ("overrides target listed twice", overrides(pod(("launcher",))), overrides(pod(("worker", "worker")))),
    ("overrides need a target", overrides(pod(("worker",))), overrides({"spec": {"hostNetwork": True}})),
    ("overrides maxItems", overrides(*[pod() for _ in range(8)]), overrides(*[pod() for _ in range(9)])),
    ("overrides unknown field", overrides(pod(hostNetwork=True)), overrides(pod(hostPID=True))),
    ("overrides label", overrides(pod(metadata={"labels": {"team": "perf"}})),
     overrides(pod(metadata={"labels": {"dlbench.io/run": "other"}}))),
    ("overrides app.kubernetes.io label", overrides(pod(metadata={"labels": {"example.com/app": "x"}})),
     overrides(pod(metadata={"labels": {"app.kubernetes.io/component": "launcher"}}))),
    ("overrides label value", overrides(pod(metadata={"labels": {"k": "v" * 63}})),
     overrides(pod(metadata={"labels": {"k": "v" * 64}}))),
    ("overrides annotation", overrides(pod(metadata={"annotations": {"k8s.v1.cni.cncf.io/networks": "ib-sriov"}})),
     overrides(pod(metadata={"annotations": {"dlbench.io/attempt": "9"}}))),
    ("overrides serviceAccountName", overrides(pod(serviceAccountName="bench-runner")),
     overrides(pod(serviceAccountName="Bench"))),
    ("overrides volume name", overrides(pod(volumes=[volume("scratch")])), overrides(pod(volumes=[volume("dshm")]))),
    ("overrides volume listed twice", overrides(pod(volumes=[volume("a"), volume("b")])),
     overrides(pod(volumes=[volume("a"), volume("a")]))),
    ("overrides mount path", overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [
        {"name": "a", "mountPath": "/scratch"}]}])),
     overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [
         {"name": "a", "mountPath": "/etc/dlbench/ssh"}]}]))),
    ("overrides mount path beside dlbench's", overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [
        {"name": "a", "mountPath": "/dlbench-cache"}]}])),
     overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [
         {"name": "a", "mountPath": "/dev/shm"}]}]))),
    ("overrides mount names a volume of the override", overrides(pod(volumes=[volume("a")], containers=[
        {"name": "worker", "volumeMounts": [{"name": "a", "mountPath": "/a"}]}])),
     overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [{"name": "b", "mountPath": "/a"}]}]))),
    ("overrides mount subPath", overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [
        {"name": "a", "mountPath": "/a", "subPath": "x/y"}]}])),
     overrides(pod(volumes=[volume("a")], containers=[{"name": "worker", "volumeMounts": [
         {"name": "a", "mountPath": "/a", "subPath": "../y"}]}]))),
    ("overrides container in its own pods", overrides(pod(("worker", "launcher"), containers=[{"name": "launcher"}])),
     overrides(pod(("worker",), containers=[{"name": "launcher"}]))),
    ("overrides container name", overrides(pod(containers=[{"name": "worker"}])), overrides(pod(containers=[{"name": "sidecar"}]))),
    ("overrides resources", overrides(pod(containers=[{"name": "worker", "resources": {
        "requests": {"cpu": "15500m", "memory": "64Gi", "hugepages-2Mi": "1Gi"}}}])),
     overrides(pod(containers=[{"name": "worker", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]))),
    ("overrides quantity", overrides(pod(containers=[{"name": "worker", "resources": {"limits": {"memory": "1.5Gi"}}}])),
     overrides(pod(containers=[{"name": "worker", "resources": {"limits": {"memory": "1.5 GiB"}}}]))),
    ("overrides env as worker.env", overrides(pod(containers=[{"name": "worker", "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}]}])),
     overrides(pod(containers=[{"name": "worker", "env": [{"name": "1BAD"}]}]))),
    ("overrides scheduling gate", overrides(pod(schedulingGates=[{"name": "example.com/quota"}])),
     overrides(pod(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))),
    ("overrides image pull secret", overrides(pod(imagePullSecrets=[{"name": "registry"}])),
     overrides(pod(imagePullSecrets=[{"name": "registry"}, {"name": "registry"}]))),
    ("overrides affinity kinds", overrides(pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}})),
     overrides(pod(affinity={"nodeAfinity": {}}))),
    ("overrides tolerations as worker.tolerations", overrides(pod(tolerations=[{"key": "rdma", "operator": "Exists"}])),
     overrides(pod(tolerations=[{"key": "rdma", "operator": "Exists", "value": "x"}]))),
    ("engine command has no launcher",
     overrides(pod(("worker",)), engine="command", command=["python3", "train.py"]),
     overrides(pod(("launcher",)), engine="command", command=["python3", "train.py"])),
    ("Guaranteed takes requests only",
     overrides(pod(containers=[{"name": "worker", "resources": {"requests": {"cpu": "16"}}}]), worker={"qosClass": "Guaranteed"}),
     overrides(pod(containers=[{"name": "worker", "resources": {"limits": {"cpu": "16"}}}]), worker={"qosClass": "Guaranteed"})),
    ("worker.qosClass", worker(qosClass="Guaranteed"), worker(qosClass="BestEffort")),
    ("worker.rdma.required", worker(rdma={"resource": "rdma/hca", "required": False}),
     worker(rdma={"resource": "rdma/hca", "required": "no"})),
    ("explicit null is absent", with_("spec.methodology", {"repeats": None}), with_("spec.methodology", {"repeats": "7"})),
]

# YAML text as users write it: kubectl reads it (YAML 1.1, go-yaml v2) and sends JSON.
YAML_HEAD = "apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: {name: probe}\n"
YAML_PROBES = [
    ("yes is a boolean", "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, worker: {nodeSelector: {gpu: \"yes\"}}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, worker: {nodeSelector: {gpu: yes}}}"),
    ("on is a boolean", "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, worker: {image: \"on\"}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, worker: {image: on}}"),
    ("octal integers", "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, data: {imageSize: 0777}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, data: {imageSize: 04001}}"),
    ("underscores in numbers", "spec: {model: resnet50, matrix: {batchSizePerDevice: [65_536], precision: [fp32]}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [65_537], precision: [fp32]}}"),
    ("exponents are integers when whole", "spec: {model: resnet50, matrix: {batchSizePerDevice: [1e3], precision: [fp32]}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [1.5e0], precision: [fp32]}}"),
    ("hexadecimal", "spec: {model: resnet50, matrix: {batchSizePerDevice: [0x40], precision: [fp32]}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [0x10001], precision: [fp32]}}"),
    ("quoted numbers are strings", "spec: {model: resnet50, matrix: {batchSizePerDevice: [64], precision: [fp32]}}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [\"64\"], precision: [fp32]}}"),
    ("merge keys", "spec:\n  model: resnet50\n  matrix:\n    <<: {batchSizePerDevice: [8], precision: [fp32]}\n",
     "spec:\n  model: resnet50\n  matrix:\n    <<: {batchSizePerDevice: [8], precision: [fp64]}\n"),
    ("tilde is null", "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, command: ~}",
     "spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, command: [\"~\"]}"),
]


def crd_verdicts(node_modules, objects):
    with open(os.path.join(ROOT, "crds", "benchmarkrun.yaml")) as f:
        crd = yaml.safe_load(f)
    result = subprocess.run(["node", os.path.join(HERE, "evaluate_crd.mjs"), node_modules],
                            input=json.dumps({"crd": crd, "objects": objects}), capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def dlbench_verdict(dlbench, path):
    result = subprocess.run([dlbench, "validate", "-f", path], capture_output=True, text=True, timeout=30)
    assert result.returncode in (0, 1), f"dlbench validate {path}: exit {result.returncode}: {result.stderr}"
    return result.returncode == 0, result.stderr.strip()


def kubectl_json(kubectl, kubeconfig, path):
    """The object kubectl would send for a YAML file: a client-side dry run."""
    result = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "create", "--dry-run=client", "-o", "json",
                             "--validate=false", "-f", path], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        return None, result.stderr.strip()
    return json.loads(result.stdout), ""


def main():
    dlbench, node_modules = sys.argv[1], sys.argv[2]
    kubectl = sys.argv[3] if len(sys.argv) > 3 else None
    failures = []
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for _, inside, outside in PROBES:
            objects += [inside, outside]
        examples = []
        for name in sorted(os.listdir(os.path.join(ROOT, "crds", "examples"))):
            with open(os.path.join(ROOT, "crds", "examples", name)) as f:
                for doc in yaml.safe_load_all(f):
                    if doc:
                        examples.append((name, doc))
        objects += [doc for _, doc in examples]
        verdicts = crd_verdicts(node_modules, objects)

        def judge(label, path, crd, want=None, what=""):
            """Compares dlbench validate's verdict on the file with the CRD's; want: the side the probe is on."""
            nonlocal checked
            checked += 1
            ours, why = dlbench_verdict(dlbench, path)
            if want is not None and crd["accepted"] != want:
                failures.append(f"{label}: the CRD {'admits' if crd['accepted'] else 'refuses'} the "
                                f"{'inside' if want else 'outside'} object{what} (probe is wrong, or the CRD changed): "
                                f"{crd['errors'][:2]}")
            if ours != crd["accepted"]:
                failures.append(f"{label}: CRD {'admits' if crd['accepted'] else 'refuses'} "
                                f"({'; '.join(crd['errors'][:2])}), dlbench validate {'admits' if ours else 'refuses'} "
                                f"({why.splitlines()[-1] if why else ''})")

        def json_file(obj):
            path = os.path.join(tmp, f"probe{checked}.json")
            with open(path, "w") as f:
                json.dump(obj, f)
            return path

        for i, (label, inside, outside) in enumerate(PROBES):
            judge(label + " [inside]", json_file(inside), verdicts[2 * i], True)
            judge(label + " [outside]", json_file(outside), verdicts[2 * i + 1], False)
        for j, (name, doc) in enumerate(examples):
            judge("example " + name, json_file(doc), verdicts[2 * len(PROBES) + j])

        if kubectl:
            from local_cluster import start_apiserver, write_kubeconfig
            server, url = start_apiserver()
            try:
                kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), url)
                subprocess.run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f",
                                os.path.join(ROOT, "crds", "benchmarkrun.yaml")], check=True, capture_output=True)
                sent = []
                for i, (label, inside, outside) in enumerate(YAML_PROBES):
                    for side, text in (("inside", inside), ("outside", outside)):
                        path = os.path.join(tmp, f"yaml{i}-{side}.yaml")
                        with open(path, "w") as f:
                            f.write(YAML_HEAD + text + "\n")
                        obj, error = kubectl_json(kubectl, kubeconfig, path)
                        sent.append((label + f" [{side}]", path, obj, error, side == "inside"))
                yaml_verdicts = crd_verdicts(node_modules, [s[2] or {} for s in sent])
                for (label, path, obj, error, want), crd in zip(sent, yaml_verdicts):
                    if obj is None:  # kubectl itself refused the text: the API server never sees it
                        crd = {"accepted": False, "errors": [error]}
                    judge(label, path, crd, want, what=f" as kubectl sends it ({json.dumps(obj)[:200]})")
            finally:
                server.kill()
                server.wait()
        else:
            print("SKIPPED: the YAML probes need kubectl")

    for failure in failures:
        print("MISMATCH:", failure)
    print(f"{checked} objects judged by the CRD (CEL + JSON schema) and by dlbench validate; {len(failures)} disagreements")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
