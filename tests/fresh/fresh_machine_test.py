#!/usr/bin/env python3
"""The README's first command works on a fresh Debian bookworm machine.

A minimal bookworm root (`mmdebstrap --variant=minbase`, the host's own apt sources) gets the
host's /etc/hosts, resolv.conf and local CA certificates and a copy of the checkout's tracked
files (what a clean clone has), and the README's first command runs inside it under chroot, as
root, exactly as written in the README's first code block: install, build, run the quickstart
benchmark. The test fails if that command fails, or if the quickstart's status is not Succeeded.

Cached between runs, honestly: the minbase tarball (Debian's base system, nothing of the
project), the .deb files apt downloads into the root (Debian's packages, verified by apt
against the signed archive on every install), and the objects the build compiles through the
ccache that install-deps.sh installs (keyed by their preprocessed source, the compiler and the
flags: a header missing from the root still fails the compile, and every link is done anew).
Packages are installed, the build configured and linked, and the benchmark run anew every time.

Usage: fresh_machine_test.py [--drop-package NAME] [--keep]
  --drop-package NAME  remove NAME from the copy of scripts/install-deps.sh first (shows that the
                       check fails when the script misses a package)
  --keep               leave the root in place for a look afterwards
Environment: DLBENCH_FRESH_CACHE (default /var/cache/dlbench) holds the tarball and the .debs.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("DLBENCH_FRESH_CACHE", "/var/cache/dlbench")
TARBALL = os.path.join(CACHE, "bookworm-minbase.tar")
COMPILER_CACHE = os.path.join(CACHE, "fresh-ccache")


def readme_first_command():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no ```sh block"
    return block.group(1).strip().splitlines()[0]


def host_sources():
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return path
    sys.exit("no apt sources on this host (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)")


def ensure_tarball():
    if os.path.isfile(TARBALL):
        return
    if os.path.isdir(TARBALL):  # left by a version that let mmdebstrap pick the format from ".partial"
        shutil.rmtree(TARBALL)
    os.makedirs(CACHE, exist_ok=True)
    partial = TARBALL + ".partial"
    print(f"fresh: making {TARBALL} with mmdebstrap (once; Debian's base system only)", flush=True)
    # --format: mmdebstrap guesses the format from the name's extension, and ".partial" reads as a directory.
    subprocess.run(["mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "bookworm", partial,
                    host_sources()], check=True)
    os.replace(partial, TARBALL)


def prepare_compiler_cache():
    """The root's ccache directory, kept between runs: bounded, and its counters zeroed so that
    compiler_cache_use() tells this run's hits."""
    os.makedirs(COMPILER_CACHE, exist_ok=True)
    with open(os.path.join(COMPILER_CACHE, "ccache.conf"), "w") as f:
        f.write("max_size = 2G\n")
    if shutil.which("ccache"):
        subprocess.run(["ccache", "--dir", COMPILER_CACHE, "--zero-stats"], capture_output=True, check=False)


def compiler_cache_use():
    """'N of M compiles came from the compiler cache' for this run, as ccache counted them."""
    if not shutil.which("ccache"):
        return "ccache is not on this host: its use in the root is not counted"
    stats = subprocess.run(["ccache", "--dir", COMPILER_CACHE, "--print-stats"], capture_output=True, text=True,
                           check=False).stdout
    counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    hits = int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0))
    misses = int(counts.get("cache_miss", 0))
    return f"{hits} of {hits + misses} compiles came from the compiler cache"


def copy_checkout(destination):
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=True).stdout
    os.makedirs(destination)
    pack = subprocess.Popen(["tar", "-C", ROOT, "--null", "-T", "-", "-cf", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    unpack = subprocess.Popen(["tar", "-C", destination, "-xf", "-"], stdin=pack.stdout)
    pack.stdin.write(files)
    pack.stdin.close()
    pack.stdout.close()
    assert unpack.wait() == 0 and pack.wait() == 0, "copying the checkout failed"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--drop-package")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("SKIPPED: the fresh-machine check needs root (mount and chroot)")
        return 0
    for tool in ("mmdebstrap", "git", "tar", "chroot", "mount"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: run ./scripts/install-deps.sh --test")

    command = readme_first_command()
    ensure_tarball()
    work = tempfile.mkdtemp(prefix="dlbench-fresh-")
    root = os.path.join(work, "root")
    mounts = []
    started = time.monotonic()
    try:
        os.makedirs(root)
        subprocess.run(["tar", "-C", root, "-xf", TARBALL], check=True)
        for name in ("hosts", "resolv.conf"):
            if os.path.exists(f"/etc/{name}"):
                shutil.copy(f"/etc/{name}", os.path.join(root, "etc", name))
        cas = "/usr/local/share/ca-certificates"
        if os.path.isdir(cas):
            shutil.copytree(cas, os.path.join(root, cas.lstrip("/")), dirs_exist_ok=True)
        src = os.path.join(root, "src", "dlbench")
        copy_checkout(src)
        if args.drop_package:
            script = os.path.join(src, "scripts", "install-deps.sh")
            with open(script) as f:
                text = f.read()
            dropped = re.sub(rf"(?<![\w.-]){re.escape(args.drop_package)}(?![\w.-])", "", text)
            assert dropped != text, f"{args.drop_package} is not in install-deps.sh"
            with open(script, "w") as f:
                f.write(dropped)
            print(f"fresh: {args.drop_package} removed from the copy of install-deps.sh", flush=True)

        archives = os.path.join(CACHE, "apt-archives")
        os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
        prepare_compiler_cache()
        for source, target, how in (("/proc", "proc", ["-t", "proc", "proc"]), ("/sys", "sys", ["--rbind", "/sys"]),
                                    ("/dev", "dev", ["--rbind", "/dev"]),
                                    (archives, "var/cache/apt/archives", ["--bind", archives]),
                                    (COMPILER_CACHE, "root/.cache/ccache", ["--bind", COMPILER_CACHE])):
            path = os.path.join(root, target)
            os.makedirs(path, exist_ok=True)
            subprocess.run(["mount", *how, path], check=True)
            mounts.append(path)

        print(f"fresh: in a minimal bookworm root, running the README's first command:\n  {command}", flush=True)
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               "LANG": "C.UTF-8", "TERM": "dumb", "DEBIAN_FRONTEND": "noninteractive"}
        result = subprocess.run(["chroot", root, "/bin/bash", "-c", f"cd /src/dlbench && {command}"], env=env)
        elapsed = time.monotonic() - started
        print(f"fresh: {compiler_cache_use()}", flush=True)
        if result.returncode != 0:
            print(f"FAILED: the README's first command exited {result.returncode} on a fresh machine "
                  f"after {elapsed:.0f} s")
            return 1
        status_path = os.path.join(src, "quickstart.status.json")
        with open(status_path) as f:
            status = json.load(f)["status"]
        if status["phase"] != "Succeeded":
            print(f"FAILED: the quickstart ended {status['phase']}: {json.dumps(status)[:500]}")
            return 1
        cases = [r for r in status["results"] if r["state"] == "Succeeded"]
        print(f"fresh: the README's first command passed on a fresh bookworm root in {elapsed:.0f} s; "
              f"{len(cases)} cases Succeeded")
        print("1 passed, 0 failed")
        return 0
    finally:
        for path in reversed(mounts):
            subprocess.run(["umount", "-R", "-l", path], check=False)
        still_mounted = [path for path in mounts if os.path.ismount(path)]
        if args.keep or still_mounted:
            # Never delete through a mount: /dev and /sys are the host's.
            print(f"fresh: root kept at {root}" + (f" (still mounted: {still_mounted})" if still_mounted else ""))
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
