#!/usr/bin/env python3
"""The short table that ends bench/gpu_check.sh, from its LOG_DIR: the self-test's and the gpu
test programs' verdicts (failures named), the poisoned runs' losses, each precision's profile by
layer kind, and dlbench against PyTorch eager with the ratio the GPU issue asks for.

    gpu_check_table.py LOG_DIR

Reads only what the steps wrote; a step that wrote nothing shows as "-" with its log's last line.
"""
import collections
import glob
import json
import os
import re
import sys

import nvml_energy  # beside this script; only ctypes
import pytorch_profile  # beside this script; formats without torch


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_line(logs, name):
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        return lines[-1][:160] if lines else "(empty log)"
    except OSError:
        return "(no log)"


def losses_of(doc, logs, name):
    """The loss after each repeat: the document's lossAfterRepeats (NaN spelled "NaN"), else the
    result table's "loss after" column (rows: repeat, samples/s, step ms, loss after)."""
    if doc.get("lossAfterRepeats"):
        return [v if isinstance(v, str) else f"{v:.4f}" for v in doc["lossAfterRepeats"]]
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    return [r[3] for r in rows if len(r) >= 4 and r[0].isdigit()]


def self_test(logs, name="self-test"):
    doc = load(os.path.join(logs, name + ".json"))
    if not doc:
        said = printed_checks(logs, name)
        return [f"{name}: no document; " + said[0]] + said[1:]
    # The document counts every check in its summary and lists only those that did not pass.
    checks = doc.get("checks", [])
    failed = [c for c in checks if c.get("outcome") == "failed"]
    summary = doc.get("summary", {})
    passed, skipped = summary.get("passed", 0), summary.get("skipped", 0)
    total = passed + skipped + summary.get("failed", len(failed))
    out = [f"{name}: {passed} of {total} checks passed, {skipped} skipped"]
    if doc.get("reason"):
        out.append(f"  {doc['reason']}: {doc.get('message', '')[:200]}")
    for c in failed:
        out.append(f"  FAILED {c.get('precision')} {c.get('name')}: {c.get('detail', '')[:200]}")
    return out


def printed_checks(logs, name):
    """What a self-test that wrote no document (stopped at its deadline, or crashed) printed: its
    checks line by line ("  prec  check  error  bound  result  detail"), the failed ones named."""
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ["(no log)"]
    outcomes = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    for line in lines:
        found = re.match(r"^  (fp32|tf32|amp|bf16|-)\s+(.*?)\s+(\S+)\s+(\S+)\s+(passed|failed|skipped)\b\s*(.*)$", line)
        if found:
            outcomes[found.group(5)] += 1
            if found.group(5) == "failed":
                failed.append(f"{found.group(1)} {found.group(2)}: {found.group(6)[:160]}")
    if not any(outcomes.values()):
        return [last_line(logs, name)]
    said = (f"stopped after {sum(outcomes.values())} checks ({outcomes['passed']} passed, "
            f"{outcomes['failed']} failed, {outcomes['skipped']} skipped); last: {last_line(logs, name)}")
    return [said] + [f"  FAILED {f}" for f in failed]


MODEL_STEP = re.compile(r"^  (fp32|tf32|amp|bf16)\s+(\S+) step, each layer fed the reference's input\s+(\S+)\s+(\S+)"
                        r"\s+(passed|failed)\s+(.*)$")


def model_steps(logs, names):
    """Each model's whole step as the self-tests `names` printed it, a line per precision and model:
    the worst layer besides the max pools, with its share of the bound, and the max pools' worst.
    Since 2026-12-04 the reference rounds each layer's input as the device's fed copy is (fp16 and
    bf16 emulated on the CPU: about 0.75 unit roundoff, 1% of amp's bound): these say how far a GPU's
    own figures allow the half-precision bounds to tighten."""
    out = []
    for name in names:
        try:
            with open(os.path.join(logs, name + ".log"), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            found = MODEL_STEP.match(line)
            if found is None:
                continue
            precision, model, error, bound, outcome, detail = found.groups()
            worst = re.search(r"worst: (.*?) \((\S+)\)(?:;|$)", detail) if outcome == "failed" else None
            if worst:
                where, figure = worst.group(1), worst.group(2)
            else:
                plain = re.search(r"worst: (.*?)(?:;|$)", detail)
                where, figure = (plain.group(1) if plain else "-"), error
            pools = re.search(r"max pools' backward at most (\S+)", detail)
            try:
                share = f", {100 * float(figure) / float(bound):.0f}% of its bound {bound}"
            except ValueError:
                share = f", bound {bound}"
            out.append(f"  {precision} {model}: {outcome}, worst {figure} ({where}){share}"
                       + (f"; max pools {pools.group(1)}" if pools else "") + f" [{name}]")
    return (["model steps in the self-tests (each layer fed the reference's rounded input):"] + out) if out else []


def memcheck(logs):
    """compute-sanitizer's verdict for each memcheck step that ran: its error summary line."""
    out = []
    for path in sorted(glob.glob(os.path.join(logs, "memcheck-*.log"))):
        name = os.path.basename(path)[:-len(".log")]
        with open(path, errors="replace") as f:
            summary = [line.strip() for line in f if "ERROR SUMMARY" in line]
        out.append(f"{name}: {summary[-1] if summary else last_line(logs, name)}")
    return out


def gtest(logs, name):
    doc = load(os.path.join(logs, name + ".json"))
    if not doc:
        return [f"{name}: no report; " + last_line(logs, name)]
    tests = [(f"{s['name']}.{t['name']}", t) for s in doc.get("testsuites", []) for t in s.get("testsuite", [])]
    failed = [(n, t) for n, t in tests if t.get("failures")]
    skipped = [n for n, t in tests if t.get("result") == "SKIPPED"]
    out = [f"{name}: {len(tests) - len(failed) - len(skipped)} of {len(tests)} passed, {len(skipped)} skipped"]
    for n, t in failed:
        # The first failure's own words, on one line: what the next session needs first.
        first = " ".join(t["failures"][0].get("failure", "").split())
        out.append(f"  FAILED {n}: {first[:300]}")
    return out


def poisoned(logs):
    out = ["poisoned ResNet-50 (--memory-plan poison): state, loss after each repeat"]
    for precision in ("fp32", "tf32", "amp", "bf16", "fp32-own", "amp-own"):
        doc = load(os.path.join(logs, f"poisoned-resnet50-{precision}.json"))
        if not doc and precision.endswith("own"):
            continue  # an A/B this call did not run
        if not doc:
            out.append(f"  {precision}: - ({last_line(logs, 'poisoned-resnet50-' + precision)})")
            continue
        losses = losses_of(doc, logs, f"poisoned-resnet50-{precision}")
        out.append(f"  {precision}: {doc.get('state')} {doc.get('reason', '')} losses {' '.join(losses)}")
    return out


def trained_models(logs):
    """The other models' few amp steps at their own image sizes: state, loss after each repeat."""
    out = ["other models, a few amp steps each at their own image size: state, samples/s, loss after each repeat"]
    for model in ("resnet152", "vgg16", "alexnet", "inception_v3", "deeplabv3plus"):
        name = f"train-{model}-amp"
        doc = load(os.path.join(logs, name + ".json"))
        if not doc:
            out.append(f"  {model}: - ({last_line(logs, name)})")
            continue
        median = (doc.get("throughput") or {}).get("median")
        state = " ".join(filter(None, (doc.get("state"), doc.get("reason"))))
        rate = f"{median:.0f} samples/s" if median else "no rate"
        out.append(f"  {model} batch {doc['case']['batchSizePerDevice']}: {state}, {rate}, "
                   f"losses {' '.join(losses_of(doc, logs, name)) or '-'}")
    return out


def profiles(logs):
    out = ["profile by kind, ms a step (forward + backward), ResNet-50 and BERT-base"]
    names = [f"resnet50-{p}" for p in ("fp32", "fp32-own", "fp32-cudnn", "fp32-graph-nhwc", "tf32", "amp", "amp-pad-4", "amp-own",
                                        "amp-conv-bn-fused", "bf16")]
    for name in names + ["bert-amp"]:
        precision = name.removeprefix("resnet50-")
        doc = load(os.path.join(logs, f"profile-{name}.json"))
        if not doc and precision.endswith(("relu", "nhwc", "fused", "own", "pad-4")):
            continue  # an A/B this call did not run
        profile = (doc or {}).get("profile")
        if not profile:
            out.append(f"  {precision}: - ({last_line(logs, 'profile-' + name)})")
            continue
        kinds = ", ".join(f"{k['kind']} {1e3 * (k['forwardSeconds'] + k['backwardSeconds']):.1f}"
                          for k in profile["kinds"][:5])
        # The rest of the step by part (the update, the loss, ...), the largest 3.
        parts = sorted((profile.get("outsideParts") or {}).items(), key=lambda part: -part[1])[:3]
        split = " (" + ", ".join(f"{part} {1e3 * seconds:.1f}" for part, seconds in parts) + ")" if parts else ""
        out.append(f"  {precision} batch {doc['case']['batchSizePerDevice']}: step "
                   f"{1e3 * profile['stepSeconds']:.1f}, outside layers {1e3 * profile['outsideLayersSeconds']:.1f}"
                   f"{split}; {kinds}")
        if name.startswith("resnet50-"):
            out += slowest_layers(profile)
        if name in ("resnet50-fp32", "resnet50-amp"):
            out += pytorch_profile_lines(logs, f"pytorch-profile-{name}")
    return out


def slowest_layers(profile, top=4):
    """The stem (conv1, whose 3 input channels tensor-core kernels dislike in channels last: the case
    for padding them to 4) and the slowest layers, forward + backward ms a step."""
    layers = profile.get("layers") or []
    if not layers:
        return []
    ms = lambda l: 1e3 * (l["forwardSeconds"] + l["backwardSeconds"])
    stem = next((l for l in layers if l.get("name") == "conv1"), None)
    slowest = sorted(layers, key=ms, reverse=True)[:top]
    line = "    " + (f"stem conv1 {ms(stem):.2f} (forward {1e3 * stem['forwardSeconds']:.2f}); " if stem else "")
    return [line + "slowest: " + ", ".join(f"{l['name']} {ms(l):.2f}" for l in slowest)]


def pytorch_profile_lines(logs, name):
    """PyTorch's side of a profile (bench/pytorch_resnet50.py --profile): its kinds, then its
    largest kernels, which name the convolutions cuDNN chose for it."""
    line = None
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            line = next((json.loads(text) for text in reversed(f.readlines()) if text.startswith("{")), None)
    except (OSError, ValueError):
        pass
    profile = (line or {}).get("profile")
    if not profile:
        return [f"  {name}: - ({last_line(logs, name)})"]
    kernels = ", ".join(f"{k['kernel'][:60]} {1e3 * k['seconds']:.1f}" for k in profile["kernels"][:4])
    return [f"  pytorch {line['precision']} batch {line['batch']}: {pytorch_profile.format_kinds(profile)}",
            f"    its largest kernels, ms a step: {kernels or '-'}"]


def algorithm_choices(logs, name):
    """{convolution: choice} from a log's DLBENCH_LOG_ALGORITHMS lines ("dlbench-worker: cudnn
    forward fp32 nchw 64x64x56x56 -> 64 3x3 stride 1 pad 1: IMPLICIT_PRECOMP_GEMM, fma, 0.0 MiB workspace")."""
    prefix = "dlbench-worker: cudnn "
    choices = {}
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            for line in f:
                if line.startswith(prefix) and ": " in line[len(prefix):]:
                    convolution, choice = line[len(prefix):].rstrip("\n").rsplit(": ", 1)
                    choices[convolution] = choice
    except OSError:
        pass
    return choices


def aux_logits_choices(logs):
    """What cuDNN chose for InceptionV3's AuxLogits.conv1 (768 filters of 5x5 over a 5x5 map) in
    fp32's model self-test: its forward was 2.91e-4 off the CPU on 2026-11-29, against a bound of
    1e-4; an FFT or Winograd algorithm's rounding, or not."""
    choices = algorithm_choices(logs, "self-test-inception-deeplab-fp32")
    aux = [(c, choice) for c, choice in sorted(choices.items()) if "-> 768 5x5" in c]
    if not aux:
        return []
    return ["InceptionV3's AuxLogits.conv1 in fp32's self-test, as cuDNN chose:"] + [f"  {c}: {choice}" for c, choice in aux]


def kernels(logs):
    """The head of bench/ncu_summary.py's table for BERT, where ncu ran."""
    path = os.path.join(logs, "ncu-bert-amp.md")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        head = f.read().splitlines()[:14]
    return ["", "BERT-base amp, batch 64, two steps under ncu (ncu-bert-amp.md has the rest):"] + head


def comparison(logs):
    rows = {}
    try:
        for line in open(os.path.join(logs, "comparison.jsonl")):
            if line.startswith("{"):
                r = json.loads(line)
                rows[(r["model"], r["precision"], r["engine"])] = r
    except (OSError, ValueError):
        pass
    # dlbench eager with its defaults, as a replayed step graph, with batch norm through the *Ex
    # calls without fusion (fp32's A/B, in NCHW), with batch norm's ReLU fused in
    # cuDNN but not the bottleneck's add (tf32's default; bf16's A/B), and with the add and ReLU
    # fused into the bottleneck's last batch norm too (amp's and bf16's default; tf32's A/B).
    # And convolutions through cuDNN's graph API (DLBENCH_CUDA_CONV=graph), in the backend's layout
    # and, for fp32, channels-last (with cuDNN's batch norms, or dlbench's own); and the bottlenecks'
    # branch gradients meeting in a convolution's backward (DLBENCH_CUDA_RESIDUAL_GRAD=accumulate,
    # the default in channels last since 2026-11-28) or summed apart (=sum, fp32's default); and BERT's attention in fused kernels
    # (DLBENCH_CUDA_ATTENTION=fused), eager and replayed; and fp32's convolution search allowed 16 GiB
    # of workspace instead of 1 (DLBENCH_CUDA_WORKSPACE_MIB=16384); and fp32's batch norms in cuDNN's
    # persistent mode, or through dlbench's own NCHW kernels with the ReLU and residual fused (=own);
    # and the weights' half (or transposed) copies kept until the values change (DLBENCH_CUDA_WEIGHT_COPIES=kept);
    # and max pooling through dlbench's own kernels (DLBENCH_CUDA_POOL=own; fp32 with the own batch
    # norms as well); and the stem's 3 input channels read padded to 4
    # (DLBENCH_CUDA_PAD_INPUT_CHANNELS=4); and only the convolution algorithms cuDNN marks
    # deterministic (DLBENCH_CUDA_ALGORITHMS=deterministic); and the bottlenecks' convolutions fused
    # with the batch norms between them (DLBENCH_CUDA_CONV_BATCH_NORM=fused, and =fused-forward: the
    # data gradients and the batch norms' backward apart).
    variants = (("dlbench", "dlbench"), ("dlbench-graph", "graph"), ("dlbench-ex", "bn *Ex"),
                ("dlbench-persistent", "bn persistent"), ("dlbench-own", "bn own kernels"),
                ("dlbench-own-accumulate", "own + accumulate"), ("dlbench-own-pool", "bn + pool own"),
                ("dlbench-pool-own", "pool own"), ("dlbench-cudnn-bn-pool", "bn + pool cudnn"),
                ("dlbench-ex-relu", "bn+relu"), ("dlbench-ex-add-relu", "bn+add+relu"),
                ("dlbench-conv-graph", "conv graph"), ("dlbench-conv-graph-nhwc", "conv graph nhwc"),
                ("dlbench-conv-graph-nhwc-own", "conv graph nhwc + bn own"),
                ("dlbench-accumulate", "grad accumulate"), ("dlbench-accumulate-graph", "accumulate + graph"),
                ("dlbench-sum", "grad sum"), ("dlbench-workspace-16g", "16 GiB search"),
                ("dlbench-attention-fused", "fused attention"),
                ("dlbench-attention-fused-graph", "fused attention + graph"),
                ("dlbench-kept", "weights kept"), ("dlbench-pad-4", "stem padded to 4"),
                ("dlbench-conv-bn-fused", "conv+bn fused"), ("dlbench-conv-bn-fused-graph", "conv+bn fused + graph"),
                ("dlbench-conv-bn-fused-forward", "conv+bn fused forward"), ("dlbench-conv-bn-apart", "conv, bn apart"),
                ("dlbench-deterministic", "deterministic"))
    out = ["| model | batch | precision | " + " | ".join(f"{label}" for _, label in variants) + " | PyTorch eager | " +
           " | ".join(f"{label} / eager" for _, label in variants) + " |",
           "|---|---|---|" + "---|" * (2 * len(variants) + 1)]
    fmt = lambda v, r: f"{v:.1f}" if v else ("-" if not r else f"- ({r.get('reason') or r.get('state')})")
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    for model, precisions in (("resnet50", ("fp32", "tf32", "amp", "bf16")), ("bert-base", ("fp32", "tf32", "amp", "bf16")),
                              ("resnet152", ("amp",)), ("inception_v3", ("amp",)), ("vgg16", ("amp",)),
                              ("alexnet", ("amp",)), ("deeplabv3plus", ("amp",))):
        for precision in precisions:
            e = rows.get((model, precision, "pytorch"))
            ev = (e or {}).get("median")
            ours = [rows.get((model, precision, engine)) for engine, _ in variants]
            values = [(r or {}).get("median") for r in ours]
            batch = (ours[0] or e or {}).get("batch", "-")
            out.append(f"| {model} | {batch} | {precision} | " + " | ".join(fmt(v, r) for v, r in zip(values, ours)) +
                       f" | {fmt(ev, e)} | " + " | ".join(ratio(v, ev) for v in values) + " |")
    # PyTorch's rows under the worker's stability rule (bench/stability.py): their spread and verdict.
    spreads = [f"{model} {precision} cv {100 * r['cv']:.2f}% {r['stability']} (+{len(r.get('discarded', []))})"
               for (model, precision, engine), r in sorted(rows.items()) if engine == "pytorch" and "cv" in r]
    if spreads:
        out.append("PyTorch's repeats: " + "; ".join(spreads))
    # Energy per sample, both sides from the same NVML counter over their measured steps.
    energy = []
    for (model, precision, engine), r in sorted(rows.items()):
        if engine != "dlbench":
            continue
        theirs = rows.get((model, precision, "pytorch")) or {}
        ours_j, theirs_j = r.get("joules_per_sample"), theirs.get("joules_per_sample")
        if ours_j is None and theirs_j is None:
            continue
        cell = lambda j, row: f"{j:.4g} J" if j is not None else f"- ({row.get('energy_why', 'no counter')})"
        energy.append(f"{model} {precision} dlbench {cell(ours_j, r)}, PyTorch eager {cell(theirs_j, theirs)}"
                      + (f", dlbench / PyTorch {ours_j / theirs_j:.2f}" if ours_j and theirs_j else ""))
    if energy:
        out.append("Energy per sample (each GPU's counter over the measured steps): " + "; ".join(energy))
    # Against PyTorch's fastest eager path too (--tuned: the optimizer's fused kernel, and BERT's
    # attention through scaled_dot_product_attention), dlbench's default eager figure over it.
    tuned = [f"{model} {precision} {fmt(r.get('median'), r)}, dlbench / tuned "
             f"{ratio((rows.get((model, precision, 'dlbench')) or {}).get('median'), r.get('median'))}"
             + (f" (cv {100 * r['cv']:.2f}% {r['stability']})" if "cv" in r else "")
             for (model, precision, engine), r in sorted(rows.items()) if engine == "pytorch-tuned"]
    if tuned:
        out.append("PyTorch tuned (fused optimizer; BERT's attention through scaled_dot_product_attention): " +
                   "; ".join(tuned))
    # PyTorch's example under engine: command, timed by dlbench-exec from its step markers, beside
    # PyTorch's own timing of the same loop: the command engine's figure should be the script's.
    command = []
    for (model, precision, engine), r in sorted(rows.items()):
        if engine != "pytorch-command":
            continue
        own = rows.get((model, precision, "pytorch")) or {}
        command.append(f"{model} {precision} {fmt(r.get('median'), r)}"
                       + (f" (cv {100 * r['cv']:.2f}%)" if "cv" in r else "")
                       + f", PyTorch's own timing {fmt(own.get('median'), own)}, engine: command / own "
                       + ratio(r.get("median"), own.get("median")))
    if command:
        out.append("PyTorch's example under engine: command (dlbench-exec times its step markers): " + "; ".join(command))
    return out


def gpu_readings(logs):
    """Issue 37 on a real GPU: each dlbench result's NVML readings and stability verdict."""
    out = ["", "| case | verdict | other processes | SM clock min / median / max MHz | reasons | max C | median W | "
                "J a sample (energy counter) | repeats cv | stability |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(os.path.basename(p)[:-len(".json")] for p in glob.glob(os.path.join(logs, "dlbench-*.json"))):
        doc = load(os.path.join(logs, name + ".json"))
        if not doc:
            continue
        i, s = doc.get("interference", {}), doc.get("stability", {})
        g = i.get("gpu")
        if g is None:
            out.append(f"| {name} | {i.get('verdict', '-')} | NO NVML READINGS (see {name}.log) | | | | | | | |")
            continue
        # energyJoules: every device's joules over each reported repeat's measured steps.
        samples = doc.get("globalBatchSize", 0) * doc.get("methodology", {}).get("measureSteps", 0)
        per_sample = nvml_energy.joules_per_sample(doc.get("energyJoules"), samples)
        energy = f"{per_sample:.4g}" if per_sample is not None else "NO ENERGY COUNTER"
        out.append(f"| {name} | {i.get('verdict')} | {g['otherProcesses']} | {g['smClockMinMhz']:.0f} / "
                   f"{g['smClockMedianMhz']:.0f} / {g['smClockMaxMhz']:.0f} | {', '.join(g['throttleReasons']) or '-'} | "
                   f"{g['temperatureMaxCelsius']:.0f} | {g['powerMedianWatts']:.0f} | {energy} | "
                   f"{100 * s.get('cv', 0):.2f}% | {s.get('verdict', '-')} (+{s.get('extraRepeats', 0)}) |")
    return out


def loss_scaling_of(doc):
    """An amp result's lossScaling: the steps skipped, the scale it ended at and, where the worker
    traced the first overflow after the repeats (lossScaling.overflow), its lines."""
    scaling = doc.get("lossScaling")
    if not scaling:
        return []
    out = [f"    loss scaling: {scaling['skippedSteps']} of {scaling['steps']} steps skipped, the scale ended at "
           f"{scaling['finalScale']:g}"]
    return out + [f"      {line[:240]}" for line in scaling.get("overflow", "").splitlines()]


def loss_scale_log(logs, name):
    """The loss scale on real data in amp (DLBENCH_LOG_LOSS_SCALE): how many steps skipped, the first
    two said, then where the skipped steps' replays found the first inf or NaN, counted by layer."""
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            said = f.readlines()
    except OSError:
        return [f"  {name}: (no log)"]
    skips = [line.strip() for line in said if re.match(r"^dlbench-worker: step \d+ skipped", line)]
    out = [f"  {name}: {len(skips)} steps skipped" + ("; " if skips else "") +
           "; ".join(line[len("dlbench-worker: "):][:220] for line in skips[:2])]
    out += loss_scaling_of(load(os.path.join(logs, name + ".json")) or {})
    # A filter gradient can overflow fp16 by itself (a sum over every pixel of the batch) while
    # every layer's input gradient stays finite: the parameter a skip names first says so.
    if skips:
        out.append("    gradients first not finite: " +
                   first_non_finite(skips, r"nearest the loss first: (\S+) \(", absent="none named"))
    replays = [line.strip() for line in said if line.startswith("  replayed at loss scale ")]
    if replays:
        out.append(f"    {len(replays)} replayed layer by layer: forward " +
                   first_non_finite(replays, r"forward: first non-finite layer output: ([^,;]+),") + "; backward " +
                   first_non_finite(replays, r"backward: first non-finite input gradient: ([^,;]+),"))
    return out


def first_non_finite(replays, pattern, top=3, absent="all finite"):
    """Where the replays' first inf or NaN was, the commonest layers first: "layer1.0.bn1
    (BatchNorm2d) 30, all finite 12" (`absent` counts the lines that name none)."""
    counts = collections.Counter()
    for line in replays:
        m = re.search(pattern, line)
        counts[m.group(1) if m else absent] += 1
    ranked = counts.most_common()
    shown = ", ".join(f"{where} {n}" for where, n in ranked[:top])
    return shown + (f", {len(ranked) - top} more layers" if len(ranked) > top else "")


def pytorch_loss_scale(logs, name):
    """PyTorch's own amp (autocast, GradScaler) on the same JPEGs with the same recipe
    (real_data_recipe.py): the steps it skipped, forward or backward, the scale it ended at and
    its loss at the first step, lowest and last, beside dlbench's."""
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            said = f.read().splitlines()
    except OSError:
        return [f"  {name}: (no log)"]
    steps = [line.split() for line in said if re.match(r"^\d+ \S+ \S+ \S+ \S+ (yes|no) \S+ (no|forward|backward) \d+$", line)]
    if not steps:
        return [f"  {name}: {last_line(logs, name)}"]
    ended = [line.rsplit(" ", 1)[-1] for line in said if " steps skipped by loss scaling" in line]
    losses = [float(s[1]) for s in steps]
    why = collections.Counter(s[7] for s in steps)
    scale = f"the scale ended at {ended[-1]}" if ended else f"stopped early, its last step ran at scale {steps[-1][6]}"
    return [f"  {name}: {len(steps) - why['no']} of {len(steps)} steps skipped by loss scaling (forward "
            f"{why['forward']}, backward {why['backward']}), {scale}; loss {losses[0]:g} at step 1, "
            f"{min(losses):g} lowest, {losses[-1]:g} at step {steps[-1][0]}"]


def input_values(logs, name):
    """dlbench-input measure --check-values: the batches amp trains on, scanned as the device reads
    them: an inf or NaN there skips a step at any loss scale."""
    try:
        with open(os.path.join(logs, name + ".log"), errors="replace") as f:
            said = [line for line in f.read().splitlines() if line.startswith("{")]
        values = json.loads(said[-1])["values"]
    except (OSError, IndexError, KeyError, ValueError):
        return [f"  {name}: {last_line(logs, name)}"]
    return [f"  {name}: {values['nonFinite']} values not finite in {values['batchesWithNonFinite']} of "
            f"{values['batches']} batches; finite ones from {values['min']} to {values['max']}"]


def real_data(logs):
    """The CPU input pipeline feeding the GPU: each real-data case beside its synthetic row."""
    out = []
    for name, synthetic in (("dlbench-resnet50-amp-imagefolder", "dlbench-resnet50-amp"),
                            ("dlbench-resnet50-amp-imagefolder-device", "dlbench-resnet50-amp"),
                            ("dlbench-deeplabv3plus-amp-cityscapes", "dlbench-deeplabv3plus-amp"),
                            ("dlbench-bert-amp-bertpretraining", "dlbench-bert-amp")):
        doc = load(os.path.join(logs, name + ".json"))
        if not doc:
            out.append(f"  {name}: no document; {last_line(logs, name)}")
            continue
        if doc.get("state") != "Succeeded" or "input" not in doc:
            out.append(f"  {name}: {doc.get('state')} {doc.get('reason', '')}: {doc.get('message', '')}")
            continue
        i = doc["input"]
        rate = doc["throughput"]["median"]
        plain = ((load(os.path.join(logs, synthetic + ".json")) or {}).get("throughput") or {}).get("median")
        against = f", {rate / plain:.2f} of synthetic's {plain:.1f}" if plain else ""
        # Which route resized an imagefolder case's images, and why not the device where it was the default.
        options = (doc.get("environment") or {}).get("backendOptions") or {}
        resized = f"; resized on the {options['inputResize']}" if "inputResize" in options else ""
        out.append(f"  {name}: {rate:.1f}/s{against}; {i['verdict']}, waited {100 * i['waitShare']:.1f}% of the "
                   f"measured time; the pipeline alone {i['pipelineThroughput']:.0f}/s with {i['decodeThreads']} "
                   f"threads, {i['files']} files, {i['skippedFiles']} skipped{resized}")
        if "inputResizeReason" in options:
            out.append(f"    not on the device: {options['inputResizeReason']}")
        out += loss_scaling_of(doc)
    out += input_values(logs, "input-check-values")
    out += loss_scale_log(logs, "amp-overflow-trace")  # made to overflow: its result must trace it
    out += loss_scale_log(logs, "real-data-amp-loss-scale")
    # Run only where a replay found a batch norm first: the same with spatial, unfused batch norms.
    if os.path.exists(os.path.join(logs, "real-data-amp-loss-scale-spatial.log")):
        out += loss_scale_log(logs, "real-data-amp-loss-scale-spatial")
    out += pytorch_loss_scale(logs, "pytorch-real-data-amp")
    return ["", "Real data through the CPU pipeline (input-bound: the case for nvJPEG and more threads):"] + out


def conv_fusion(logs):
    """conv_fusion_probe's summary: each pass fused with batch norm, the convolutions an engine built
    it for, and on the GPU its milliseconds a step against its plain pass's over the same ones and
    how many were checked and found off; the described H200's answer (no GPU needed) beside the
    device's own."""
    out = []
    for name, what in (("conv-fusion", "this GPU"), ("conv-fusion-check", "this GPU, checked at batch 8"),
                       ("conv-fusion-bf16", "this GPU in bf16, built at batch 8"),
                       ("conv-fusion-described", "the described H200")):
        doc = load(os.path.join(logs, name + ".json"))
        if not doc:
            out.append(f"  {what}: no document; {last_line(logs, name)}")
            continue
        cut = "" if doc.get("complete") else " (cut short: the shapes it finished)"
        out.append(f"  {what}, {doc['device']}, cuDNN {doc['cudnnVersion']}{cut}:")
        canary = doc.get("runtimeFusionCanary") or {}
        if "ranked" in canary:  # whether runtime-fusion engines were offered at all
            line = (f"    runtime-fusion engines: {canary['ranked']} ranked, {canary['built']} built, "
                    f"{canary['runtimeCompiledPlans']} compiled at build")
            if "buildMilliseconds" in canary:
                line += f" in {canary['buildMilliseconds']:.0f} ms"
            if canary.get("cudaDriver") == "absent":
                line += " (no CUDA driver here: cuDNN offers them none)"
            elif canary.get("cudaDriver") == "stub":
                line += " (the driver's stub here: compiled, never loaded)"
            out.append(line)
        for entry in doc["summary"]:
            line = f"    {entry['pass']}: {entry['convolutionsBuilt']} of {entry['convolutions']} convolutions"
            if "millisecondsPerStep" in entry and entry["pass"] != entry["baseline"]:
                line += (f"; {entry['millisecondsPerStep']:.2f} ms a step against {entry['baseline']}'s "
                         f"{entry['baselineMillisecondsPerStep']:.2f} over the same {entry['convolutionsTimed']}")
            elif "millisecondsPerStep" in entry:
                line += f"; {entry['millisecondsPerStep']:.2f} ms a step"
            if entry.get("convolutionsFastestNotFirstPlan"):
                line += f"; fastest not the best-ranked plan for {entry['convolutionsFastestNotFirstPlan']}"
            if "convolutionsChecked" in entry:
                line += f"; checked {entry['convolutionsChecked']}, {entry['convolutionsOff']} off their bound"
            if entry.get("compiles"):
                line += (f"; {entry['compiles']} plans compiled at build, {entry['compileMilliseconds'] / 1000:.1f} s "
                         f"in all, the slowest {entry['slowestCompileMilliseconds']:.0f} ms")
            if entry.get("secondRunWithoutZeroing"):
                said = ", ".join(f"{what} {n}" for what, n in sorted(entry["secondRunWithoutZeroing"].items()))
                line += f"; sums after a second run without zeroing: {said}"
            out.append(line)
    # What the model's fused rows did: how many bottlenecks fused, from their results.
    for name in ("dlbench-resnet50-amp", "dlbench-resnet50-amp-conv-bn-fused", "dlbench-resnet50-amp-conv-bn-fused-graph",
                 "dlbench-resnet50-amp-conv-bn-fused-forward"):
        options = ((load(os.path.join(logs, name + ".json")) or {}).get("environment") or {}).get("backendOptions") or {}
        if "convBatchNormBlocks" in options:
            out.append(f"  {name}: bottlenecks fused {options['convBatchNormBlocks']}, their data gradients with "
                       f"the batch norms' {options.get('convBatchNormGradientBlocks', '-')}")
    return ["", "Convolutions fused with batch norm (cuDNN's engines, ResNet-50 amp at batch 256):"] + out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    logs = sys.argv[1]
    lines = []
    lines += self_test(logs)
    for name in ("self-test-fp32-own", "self-test-own-channels-last", "self-test-own-pool", "self-test-fp32-persistent",
                 "self-test-fp32-graph-nhwc", "self-test-weight-copies-kept", "self-test-pad-4",
                 "self-test-attention-fused", "self-test-conv-batch-norm-fused"):
        lines += self_test(logs, name)
    for precision in ("fp32", "tf32", "amp", "bf16"):
        for group in ("resnet152-vgg16-alexnet", "inception-deeplab"):
            lines += self_test(logs, f"self-test-{group}-{precision}")
    groups = [f"self-test-{group}-{precision}" for precision in ("fp32", "tf32", "amp", "bf16")
              for group in ("resnet152-vgg16-alexnet", "inception-deeplab")]
    lines += model_steps(logs, ["self-test"] + groups)
    for shard in ("1of2", "2of2"):
        lines += gtest(logs, f"cuda-backend-tests-{shard}")
    lines += gtest(logs, "gpu-tests")
    lines += memcheck(logs)
    lines += poisoned(logs)
    lines += trained_models(logs)
    lines += profiles(logs)
    lines += aux_logits_choices(logs)
    lines += kernels(logs)
    lines += [""] + comparison(logs)
    lines += real_data(logs)
    lines += conv_fusion(logs)
    lines += gpu_readings(logs)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
