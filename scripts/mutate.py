#!/usr/bin/env python3
"""mutate.py — the mutation runner behind scripts/mutate.sh (see there for usage).

build (a machine with nvcc, no GPU needed):
  For the unmutated control and every patch of validation/mutants/*.patch: copy the
  files the patch touches into a scratch tree, apply it, recompile only the
  kernel translation units that include a patched file (from the build's
  depfiles; a patch's "# tus:" line narrows that set), with the build's own nvcc
  command lines and the scratch tree first on the include path, and relink
  libmc_kernels.so from the build's own link line with those objects swapped in
  (here once, to prove it links). The result is staged for a GPU machine:
  <out>/stage (scripts/stage_build.sh of the build, with the emulation dump of the
  device-vs-emulation test), <out>/objects.tar.xz (the build's kernel objects and
  libmc_core.a, and each mutant's recompiled objects: relinking there is what
  keeps the carry small — 39 linked libraries differ in scattered bytes and do not
  compress), <out>/manifest.json (with the link recipe), <out>/patches/ and
  <out>/suite.json (the fast GPU suite).

run (the GPU machine; python3, tar and the C++ driver that links the library):
  Unpacks the objects, links the control's and each mutant's libmc_kernels.so with
  the build's link line, makes one hard-linked copy of the stage per job, runs the
  fast suite on the CONTROL first (it must pass, and must not skip: a machine
  without a GPU proves nothing), then every mutant, several at a time, each in
  its own copy with its libmc_kernels.so swapped in. A mutant is killed when a
  suite command fails, crashes or times out; it survives when every command
  passes. Commands run in the suite's order with --gtest_fail_fast, so a killed
  mutant stops early. Writes <results>/mutation.json (schema mambacheck-mutation/1,
  reports/README.md) and the logs; reports/generate.py --mutation turns it into a
  section of precision.md.
"""
import argparse
import concurrent.futures as cf
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time

from gtest_list import selected_tests

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SCHEMA = "mambacheck-mutation/1"


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------- patches
def parse_patch(path):
    meta = {"id": None, "family": "", "kind": "", "what": [], "expect": "", "equivalent": [],
            "tus": [], "files": [], "patch": os.path.basename(path)}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"# (\w+): ?(.*)$", line.rstrip("\n"))
            if m and not line.startswith("+++") and not line.startswith("---"):
                k, v = m.group(1), m.group(2)
                if k == "mutant":
                    meta["id"] = v.strip()
                elif k in ("what", "equivalent"):
                    meta[k].append(v)
                elif k == "tus":
                    meta["tus"] = v.split()
                elif k in meta:
                    meta[k] = v
            if line.startswith("+++ b/"):
                meta["files"].append(line[6:].split("\t")[0].strip())
    meta["what"] = " ".join(meta["what"])
    meta["equivalent"] = " ".join(meta["equivalent"])
    if not meta["id"] or not meta["files"]:
        raise SystemExit(f"{path}: needs a '# mutant: <id>' line and a unified diff")
    return meta


def load_mutants(only=None):
    d = os.path.join(ROOT, "validation", "mutants")
    ms = [parse_patch(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".patch")]
    ids = [m["id"] for m in ms]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"duplicate mutant ids: {sorted(dup)}")
    if only:
        ms = [m for m in ms if m["id"] in only]
    return ms


# ------------------------------------------------------------------------------ build
def kernel_units(build, emulated=False):
    """The kernel TUs of the build: [{src, rel, obj (abs), argv, cwd, deps}]. emulated: the
    host-compiled wrappers of validation/emulation (rel = the kernel source they include)."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        db = json.load(f)
    kdir = os.path.join(ROOT, "kernels") + os.sep
    edir = os.path.join(os.path.realpath(build), "validation", "emulation", "emu") + os.sep
    units = []
    for e in db:
        src = os.path.realpath(e["file"])
        if emulated:
            if not (src.startswith(edir) and os.path.basename(src).startswith("kernels__")):
                continue
        elif not src.startswith(kdir):
            continue
        argv = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        cwd = e["directory"]
        i = argv.index("-o")
        obj = os.path.normpath(os.path.join(cwd, argv[i + 1]))
        deps = set()
        dep = obj + ".d"
        if os.path.exists(dep):
            with open(dep) as f:
                text = f.read().replace("\\\n", " ")
            for tok in text.split():
                if tok.endswith(":"):
                    continue
                deps.add(os.path.realpath(os.path.join(cwd, tok)))
        deps.add(src)
        rel = (os.path.basename(src)[: -len(".cpp")].replace("__", "/") if emulated
               else os.path.relpath(src, ROOT))
        units.append({"src": src, "rel": rel, "obj": obj, "argv": argv, "cwd": cwd, "deps": deps})
    if not units:
        raise SystemExit(f"{build}/compile_commands.json lists no kernels/ sources (CUDA build?)")
    return units


def link_line(build):
    d = os.path.join(build, "kernels", "CMakeFiles", "mc_kernels.dir")
    with open(os.path.join(d, "link.txt")) as f:
        return shlex.split(f.read().strip().splitlines()[0]), os.path.join(build, "kernels")


def run(cmd, cwd=None, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def link_recipe(units, link):
    """The build's link line of libmc_kernels.so with placeholders: @OBJ:<rel> for each kernel
    object, @CORE for libmc_core.a, @OUT for the output; everything else as it is."""
    argv, lcwd = link
    by_obj = {u["obj"]: u["rel"] for u in units}
    recipe, core = [], None
    for i, x in enumerate(argv):
        p = os.path.normpath(os.path.join(lcwd, x))
        if i > 0 and argv[i - 1] == "-o":
            recipe.append("@OUT")
        elif x.endswith(".o") and p in by_obj:
            recipe.append("@OBJ:" + by_obj[p])
        elif os.path.basename(x) == "libmc_core.a":
            recipe.append("@CORE")
            core = p
        else:
            recipe.append(x)
    missing = set(by_obj.values()) - {x[5:] for x in recipe if x.startswith("@OBJ:")}
    if missing or core is None:
        raise SystemExit(f"link line of libmc_kernels.so: cannot map {sorted(missing)} / libmc_core.a")
    return recipe, core


def link_library(recipe, objs_dir, overlay_dir, core, out, compiler=None):
    """Links libmc_kernels.so from the base objects, the mutant's objects overriding them."""
    argv = []
    for x in recipe:
        if x == "@OUT":
            argv.append(out)
        elif x == "@CORE":
            argv.append(core)
        elif x.startswith("@OBJ:"):
            rel = x[5:] + ".o"
            mine = os.path.join(overlay_dir, rel) if overlay_dir else None
            argv.append(mine if mine and os.path.exists(mine) else os.path.join(objs_dir, rel))
        else:
            argv.append(portable_library(x))
    if compiler:
        argv[0] = compiler
    run(argv)


def portable_library(arg):
    """A library path of the build machine's link line that this machine lacks
    (CUDA under lib/ here, lib64/ or targets/<arch>/lib there): the same file
    name from this machine's CUDA library folders, else -l:<name> for the linker
    to find on its own search path."""
    if not (arg.startswith("/") and (arg.endswith(".so") or arg.endswith(".a"))) or os.path.exists(arg):
        return arg
    name = os.path.basename(arg)
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            cand = os.path.join(root, sub, name)
            if os.path.exists(cand):
                return cand
    return "-l:" + name


def patched_sources(m, wdir):
    """A fresh <wdir>/src holding copies of the files mutant m touches, with its patch
    applied. -> (src_root, the real paths of the originals, patch's CompletedProcess)."""
    shutil.rmtree(wdir, ignore_errors=True)
    src_root = os.path.join(wdir, "src")
    os.makedirs(src_root)
    touched = []
    for rel in m["files"]:
        dst = os.path.join(src_root, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), dst)
        touched.append(os.path.realpath(os.path.join(ROOT, rel)))
    with open(os.path.join(ROOT, "validation", "mutants", m["patch"])) as f:
        r = subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch", "-d", src_root],
                           stdin=f, capture_output=True, text=True)
    return src_root, touched, r


def units_reached(m, units, touched):
    """The units (kernel_units) that mutant m's patch reaches: those depending on a file it
    touches (`touched`, real paths in this checkout), narrowed to its '# tus:' when it names
    them. Refuses a named unit that is not reached, and an empty answer: otherwise the
    unpatched code would be tested and the mutant reported as surviving (a build of another
    checkout, or one without its .d files, reaches nothing)."""
    affected = [u for u in units if any(t in u["deps"] for t in touched)]
    if m["tus"]:
        want = set(m["tus"])
        affected = [u for u in affected if u["rel"] in want]
        missing = want - {u["rel"] for u in affected}
        if missing:
            raise RuntimeError(f"{m['id']}: '# tus:' names {sorted(missing)}, which do not include a patched file")
    if not affected:
        raise RuntimeError(f"{m['id']}: no kernel translation unit of the build depends on "
                           f"{m['files']} as {ROOT} has them (is --build a build of this "
                           "checkout, with its .d files?)")
    return affected


def build_one(m, units, work, jobs, ccache):
    """Compiles the affected TUs of mutant m into <work>/<id>/obj/<rel>.o; returns the info."""
    t0 = time.time()
    wdir = os.path.join(work, m["id"])
    src_root, touched, r = patched_sources(m, wdir)
    if r.returncode != 0:
        raise RuntimeError(f"{m['patch']} does not apply: {r.stdout}{r.stderr}")
    affected = units_reached(m, units, touched)

    def compile_unit(u):
        argv = list(u["argv"])
        i = argv.index("-o")
        obj = os.path.join(wdir, "obj", u["rel"] + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        argv[i + 1] = obj
        src = os.path.join(src_root, u["rel"]) if os.path.exists(os.path.join(src_root, u["rel"])) else u["src"]
        argv = [src if os.path.realpath(a) == u["src"] else a for a in argv]
        argv = argv[:1] + ["-I" + src_root] + argv[1:]
        if ccache:
            argv = [ccache] + argv
        run(argv, cwd=u["cwd"])

    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        list(ex.map(compile_unit, affected))
    info = {"seconds": round(time.time() - t0, 1), "units": [u["rel"] for u in affected],
            "obj_dir": os.path.join(wdir, "obj")}
    # For a mutant meant to be invisible (another bit pattern, or believed
    # equivalent): does it change the device code at all?
    if m["kind"] in ("bits", "equivalent-candidate"):
        info["device_code_identical"] = device_code_identical(m, affected, src_root, wdir, work)
    return info


def cubin_argv(u, src, include_first, out):
    """u's compile line turned into one that writes the device code alone: a cubin for
    the first real architecture, without line tables (they name the source's path)."""
    argv, arch, skip = [], None, False
    for x in u["argv"]:
        if skip:
            skip = False
            continue
        if x == "-o":
            skip = True
            continue
        if x in ("-c", "-lineinfo", "-G"):
            continue
        m = re.match(r"--generate-code=arch=compute_(\d+a?),code=", x) or re.match(r"-arch=sm_(\d+a?)$", x)
        if m:
            arch = arch or m.group(1)
            continue
        argv.append(os.path.realpath(src) if os.path.realpath(x) == u["src"] else x)
    if arch is None:
        raise RuntimeError(f"{u['rel']}: no --generate-code in its compile line")
    if include_first:
        argv = argv[:1] + ["-I" + include_first] + argv[1:]
    return argv + [f"-arch=sm_{arch}", "-cubin", "-o", out]


_unmutated_cubins = {}  # unit rel -> its unmutated cubin (one compile per unit and build)


def unmutated_cubin(u, work):
    if u["rel"] not in _unmutated_cubins:
        out = os.path.join(work, "cubin-unmutated", u["rel"] + ".cubin")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        run(cubin_argv(u, u["src"], None, out), cwd=u["cwd"])
        _unmutated_cubins[u["rel"]] = out
    return _unmutated_cubins[u["rel"]]


def device_code_identical(m, units, src_root, wdir, work):
    """True when every unit mutant m recompiles has byte-identical device code with and
    without the patch: the mutant is then equivalent by construction (its host code is
    the unmutated one's: the patches change kernel bodies)."""
    for u in units:
        mine = os.path.join(src_root, u["rel"])
        out = os.path.join(wdir, "cubin", u["rel"] + ".cubin")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        run(cubin_argv(u, mine if os.path.exists(mine) else u["src"], src_root, out), cwd=u["cwd"])
        if not filecmp_same(unmutated_cubin(u, work), out):
            return False
    return True


def require_makefile_build(build, cmd):
    """build and emulate read CMake's Unix Makefiles files: each target's link.txt and the
    compilers' .d dependency files beside the objects. A Ninja build keeps neither (its
    dependencies live in .ninja_deps), so a header patch would meet no unit; refuse it."""
    ninja = os.path.exists(os.path.join(build, "build.ninja"))
    if ninja or not os.path.exists(os.path.join(build, "Makefile")):
        raise SystemExit(
            f"mutate {cmd}: --build {build} is not a Unix Makefiles build (no Makefile"
            f"{', a build.ninja' if ninja else ''}): "
            "this script reads each target's CMakeFiles/<target>.dir/link.txt and the .d "
            "dependency files beside the objects; configure one with scripts/build.sh "
            "(CMake's default generator) and pass it with --build")


def cmd_build(a):
    build = os.path.realpath(a.build)
    require_makefile_build(build, "build")
    out = os.path.realpath(a.out)
    mutants = load_mutants(set(a.only.split(",")) if a.only else None)
    with open(os.path.join(ROOT, "validation", "mutants", "suite.json")) as f:
        suite = json.load(f)
    targets = sorted({"mc_kernels", "scan_bits_emulated"} |
                     {os.path.basename(c["exe"]) for c in suite["commands"]})
    log(f"mutate build: {len(mutants)} mutants; building {', '.join(targets)} in {build}")
    run(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + targets)
    dump = os.path.join(build, "validation", "scan_emulation_bits.bin")
    log("mutate build: writing the emulation dump of the device-vs-emulation test")
    run([os.path.join(build, "validation", "scan_bits_emulated"), "--out", dump])
    os.makedirs(out, exist_ok=True)
    for sub in ("stage", "patches", "so", "objs", "slots", "results", "libs"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    for f in ("mutants.tar.xz", "objects.tar.xz"):
        if os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))
    run([os.path.join(ROOT, "scripts", "stage_build.sh"), build, os.path.join(out, "stage")])
    # Only what the fast suite runs: its programs and the emulation dump (the
    # library itself is linked per slot from the objects, control or mutant).
    keep = {os.path.basename(c["exe"]) for c in suite["commands"]} | {"scan_emulation_bits.bin"}
    stage = os.path.join(out, "stage")
    for sub in ("bench", "cli", "reports", "Testing"):
        shutil.rmtree(os.path.join(stage, sub), ignore_errors=True)
    vdir = os.path.join(stage, "validation")
    for name in os.listdir(vdir):
        path = os.path.join(vdir, name)
        if name in keep:
            continue
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    os.remove(os.path.join(stage, "kernels", "libmc_kernels.so"))
    units = kernel_units(build)
    recipe, core = link_recipe(units, link_line(build))
    # The base: the build's own kernel objects and libmc_core.a (the control links these).
    objs = os.path.join(out, "objs")
    for u in units:
        dst = os.path.join(objs, "base", u["rel"] + ".o")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(u["obj"], dst)
    shutil.copy2(core, os.path.join(objs, "libmc_core.a"))
    os.makedirs(os.path.join(out, "patches"))
    work = os.path.join(build, "mutant-work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ccache = shutil.which("ccache") if os.environ.get("CCACHE_DIR") else None
    manifest = {"schema": SCHEMA + "-manifest", "git_sha": git_sha(), "link": recipe,
                "mutants": []}
    # Every library is linked here once too (and thrown away): what the GPU machine
    # links from the same objects is proven to link.
    t0 = time.time()
    link_library(recipe, os.path.join(objs, "base"), None, os.path.join(objs, "libmc_core.a"),
                 os.path.join(work, "control.so"))
    manifest["control"] = {"seconds": round(time.time() - t0, 1), "units": []}
    log(f"mutate build: control = the build's objects, linked in {manifest['control']['seconds']} s")
    failed = []
    for m in mutants:
        try:
            info = build_one(m, units, work, a.jobs, ccache)
            t1 = time.time()
            link_library(recipe, os.path.join(objs, "base"), info["obj_dir"],
                         os.path.join(objs, "libmc_core.a"), os.path.join(work, m["id"] + ".so"))
            os.remove(os.path.join(work, m["id"] + ".so"))
            info["seconds"] = round(info["seconds"] + time.time() - t1, 1)
        except RuntimeError as e:
            failed.append((m["id"], str(e)))
            log(f"  {m['id']}: BUILD FAILED\n{e}")
            continue
        for rel in info["units"]:
            dst = os.path.join(objs, m["id"], rel + ".o")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(info["obj_dir"], rel + ".o"), dst)
        shutil.copy2(os.path.join(ROOT, "validation", "mutants", m["patch"]), os.path.join(out, "patches"))
        entry = {k: m[k] for k in ("id", "family", "kind", "what", "expect", "equivalent", "files", "patch")}
        entry.update({"seconds": info["seconds"], "units": info["units"]})
        if "device_code_identical" in info:
            entry["device_code_identical"] = info["device_code_identical"]
            if info["device_code_identical"]:
                prior = entry["equivalent"].rstrip()
                entry["equivalent"] = ((prior + ("" if prior.endswith(".") else ".") + " ") if prior else "") + (
                    "Proven: with the patch, the compiled device code of " + ", ".join(info["units"]) +
                    " is byte-identical to the unmutated one's (mutate.sh build compares the cubins).")
        manifest["mutants"].append(entry)
        log(f"  {m['id']:40s} {info['seconds']:6.1f} s  {len(info['units'])} unit(s)" +
            ("" if "device_code_identical" not in info else
             "  device code IDENTICAL (equivalent)" if info["device_code_identical"] else
             "  device code differs"))
        shutil.rmtree(os.path.join(work, m["id"]), ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    log("mutate build: packing the objects (one solid xz archive)")
    arch = os.path.join(out, "objects.tar.xz")
    if shutil.which("xz"):
        tar = subprocess.Popen(["tar", "-C", objs, "-cf", "-", "."], stdout=subprocess.PIPE)
        with open(arch, "wb") as f:
            subprocess.run(["xz", "-6", "-T2", "-c"], stdin=tar.stdout, stdout=f, check=True)
        tar.wait()
    else:
        with tarfile.open(arch, "w:xz", preset=6) as t:
            t.add(objs, arcname=".")
    shutil.rmtree(objs)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    shutil.copy2(os.path.join(ROOT, "validation", "mutants", "suite.json"), os.path.join(out, "suite.json"))
    size = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    log(f"mutate build: {len(manifest['mutants'])} mutants + control in {out} "
        f"({size / 2**20:.1f} MiB; objects {os.path.getsize(arch) / 2**20:.1f} MiB)")
    if size > 60 * 2**20:
        log("mutate build: WARNING: more than 60 MiB, over what a carry may hold")
    if failed:
        log(f"mutate build: {len(failed)} mutant(s) did not build: {[i for i, _ in failed]}")
        return 1
    return 0


def git_sha():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    sha = r.stdout.strip() or "unknown"
    d = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                       capture_output=True, text=True)
    return sha + ("-dirty" if d.stdout.strip() else "")


# --------------------------------------------------------------------------- emulate
def cmd_emulate(a):
    """CPU-side prediction for the scan mutants: the emulated dump (and, where the dump is
    unchanged, the emulated scan parity suite on its fused/chained cases) with the patch."""
    build = os.path.realpath(a.build)
    require_makefile_build(build, "emulate")
    mutants = [m for m in load_mutants(set(a.only.split(",")) if a.only else None)
               if all(f.startswith("kernels/scan/") for f in m["files"])]
    run(["cmake", "--build", build, "-j", str(a.jobs), "--target", "scan_bits_emulated",
         "test_scan_emulated"])
    edir = os.path.join(build, "validation", "emulation")
    ref_dump = os.path.join(build, "mutant-emu", "reference.bin")
    os.makedirs(os.path.dirname(ref_dump), exist_ok=True)
    run([os.path.join(build, "validation", "scan_bits_emulated"), "--out", ref_dump])
    units = kernel_units(build, emulated=True)
    links = {}
    for exe in ("scan_bits_emulated", "test_scan_emulated"):
        with open(os.path.join(edir, "CMakeFiles", exe + ".dir", "link.txt")) as f:
            links[exe] = shlex.split(f.read().strip().splitlines()[0])
    results = []
    for m in mutants:
        t0 = time.time()
        wdir = os.path.join(build, "mutant-emu", m["id"])
        src_root, touched, r = patched_sources(m, wdir)
        if r.returncode != 0:
            raise RuntimeError(f"{m['id']}: the patch does not apply: {r.stdout}{r.stderr}")
        affected = units_reached(m, units, touched)
        objs = []

        def compile_unit(u):
            argv = list(u["argv"])
            i = argv.index("-o")
            obj = os.path.join(wdir, "obj", os.path.basename(u["obj"]))
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            argv[i + 1] = obj
            argv = argv[:1] + ["-I" + src_root] + argv[1:]
            run(argv, cwd=u["cwd"])
            return obj

        with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
            objs = list(ex.map(compile_unit, affected))
        arch = os.path.join(wdir, "libmc_scan_emulated.a")
        shutil.copy2(os.path.join(edir, "libmc_scan_emulated.a"), arch)
        if objs:
            run(["ar", "r", arch] + objs)
        exes = {}
        for exe, argv in links.items():
            out = os.path.join(wdir, exe)
            new = [arch if x == "libmc_scan_emulated.a" else x for x in argv]
            new[new.index("-o") + 1] = out
            run(new, cwd=edir)
            exes[exe] = out
        dump = os.path.join(wdir, "bits.bin")
        r = subprocess.run([exes["scan_bits_emulated"], "--out", dump], capture_output=True, text=True,
                           timeout=600)
        e = {"id": m["id"], "family": m["family"], "kind": m["kind"], "units": [u["rel"] for u in affected]}
        if r.returncode != 0:
            e["prediction"], e["how"] = "killed", "the emulated dump program failed: " + r.stderr[-200:]
        elif not filecmp_same(dump, ref_dump):
            e["prediction"], e["how"] = "killed", "scan-bits (the emulated dump differs)"
        else:
            r = subprocess.run([exes["test_scan_emulated"], "--gtest_brief=1", "--gtest_filter=" + a.filter],
                               capture_output=True, text=True, timeout=1200)
            failed = list(dict.fromkeys(FAILED.findall(r.stdout)))
            if r.returncode != 0:
                e["prediction"] = "killed"
                e["how"] = "scan parity (emulated): " + (", ".join(failed[:3]) or f"exit {r.returncode}")
            else:
                e["prediction"], e["how"] = "survives the emulated checks", "dump identical, parity passes"
        e["seconds"] = round(time.time() - t0, 1)
        results.append(e)
        log(f"  {m['id']:40s} {e['prediction']:30s} {e['seconds']:6.1f} s  {e['how']}")
        shutil.rmtree(wdir, ignore_errors=True)
    out = os.path.join(build, "mutant-emu", "emulation.json")
    with open(out, "w") as f:
        json.dump({"schema": SCHEMA + "-emulated", "git_sha": git_sha(), "filter": a.filter,
                   "mutants": results}, f, indent=1)
    log(f"mutate emulate: {sum(e['prediction'] == 'killed' for e in results)} of {len(results)} scan "
        f"mutants caught on the CPU emulation -> {out}")
    return 0


def filecmp_same(a, b):
    import filecmp
    return filecmp.cmp(a, b, shallow=False)


# -------------------------------------------------------------------------------- run
FAILED = re.compile(r"^\[  FAILED  \] ([^\s,]+)", re.M)
SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+)", re.M)
PASSED = re.compile(r"^\[  PASSED  \] (\d+) test", re.M)


def run_suite(slot, suite, logs, tag, threads, timeouts, deadline=None):
    """Runs the suite's commands in `slot`; returns (ok, results). Stops at the first failure."""
    results = []
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MC_SCAN_EMU_BITS"] = os.path.join(slot, "validation", "scan_emulation_bits.bin")
    env.pop("MAMBACHECK_GPU_SPREAD", None)
    for c in suite["commands"]:
        e = dict(env)
        e.update(c.get("env", {}))
        exe = os.path.join(slot, c["exe"])
        args = [exe] + c.get("args", []) + ["--gtest_fail_fast", "--gtest_color=no"]
        limit = timeouts.get(c["name"], c.get("timeout", 120))
        if deadline is not None:
            limit = max(5, min(limit, deadline - time.time()))
        t0 = time.time()
        logf = os.path.join(logs, f"{tag}.{c['name']}.log")
        with open(logf, "w") as lf:
            try:
                p = subprocess.run(args, cwd=os.path.dirname(exe), env=e, stdout=lf,
                                   stderr=subprocess.STDOUT, timeout=limit)
                rc = p.returncode
                timed_out = False
            except subprocess.TimeoutExpired:
                rc, timed_out = None, True
        with open(logf, errors="replace") as lf:
            text = lf.read()
        r = {"name": c["name"], "rc": rc, "seconds": round(time.time() - t0, 1), "timed_out": timed_out,
             "failed_tests": list(dict.fromkeys(FAILED.findall(text)))[:5], "skipped": len(SKIPPED.findall(text)),
             "passed": sum(int(x) for x in PASSED.findall(text))}
        results.append(r)
        if timed_out or rc != 0:
            return False, results
    return True, results


def verdict_of(results):
    last = results[-1]
    if last["timed_out"]:
        return f"{last['name']}: timed out"
    if last["rc"] is not None and last["rc"] < 0:
        return f"{last['name']}: crashed (signal {-last['rc']})"
    tests = ", ".join(last["failed_tests"]) or f"exit status {last['rc']}"
    return f"{last['name']}: {tests}"


def unpack(d):
    objs = os.path.join(d, "objs")
    if os.path.isdir(os.path.join(objs, "base")):
        return objs
    os.makedirs(objs, exist_ok=True)
    arch = os.path.join(d, "objects.tar.xz")
    if shutil.which("xz") and shutil.which("tar"):
        subprocess.run(["tar", "-C", objs, "-xJf", arch], check=True)
    else:
        with tarfile.open(arch, "r:xz") as t:
            t.extractall(objs)
    return objs


def linker(recipe):
    """The build's compiler driver if this machine has it, else c++ / g++ from PATH."""
    if os.path.exists(recipe[0]):
        return recipe[0]
    for c in ("c++", "g++"):
        if shutil.which(c):
            return shutil.which(c)
    raise SystemExit("mutate run: no C++ compiler driver to link libmc_kernels.so with")


def make_slot(stage, slot, lib):
    shutil.rmtree(slot, ignore_errors=True)
    r = subprocess.run(["cp", "-al", stage, slot], capture_output=True)
    if r.returncode != 0:
        shutil.copytree(stage, slot, symlinks=True)
    install(slot, lib)


def install(slot, lib):
    dst = os.path.join(slot, "kernels", "libmc_kernels.so")
    if os.path.lexists(dst):
        os.unlink(dst)  # never write through a hard link shared with the stage
    shutil.copy2(lib, dst)


def gpu_name():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cmd_link(a):
    """The control library alone: a full staged build carried without its 28 MiB
    libmc_kernels.so gets it back from the objects the mutation runner carries."""
    d = os.path.realpath(a.dir)
    with open(os.path.join(d, "manifest.json")) as f:
        recipe = json.load(f)["link"]
    objs = unpack(d)
    link_library(recipe, os.path.join(objs, "base"), None, os.path.join(objs, "libmc_core.a"),
                 os.path.realpath(a.out), linker(recipe))
    log(f"mutate link: {a.out}")
    return 0


def cmd_run(a):
    d = os.path.realpath(a.dir)
    results_dir = os.path.realpath(a.out or os.path.join(d, "results"))
    logs = os.path.join(results_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    t_start = time.time()
    deadline = t_start + a.budget
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(d, "suite.json")) as f:
        suite = json.load(f)
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {m["id"] for m in manifest["mutants"]}
        if unknown:
            raise SystemExit(f"--only names mutants the manifest does not have: {sorted(unknown)}")
        manifest["mutants"] = [m for m in manifest["mutants"] if m["id"] in want]
    objs = unpack(d)
    recipe = manifest["link"]
    cxx = linker(recipe)
    libs = os.path.join(d, "libs")
    os.makedirs(libs, exist_ok=True)
    core = os.path.join(objs, "libmc_core.a")

    def lib_of(mid):
        """libmc_kernels.so of the control (None) or of mutant `mid`, linked here."""
        out_so = os.path.join(libs, (mid or "control") + ".so")
        link_library(recipe, os.path.join(objs, "base"), os.path.join(objs, mid) if mid else None,
                     core, out_so, cxx)
        return out_so

    stage = os.path.join(d, "stage")
    jobs = a.jobs
    threads = max(1, (os.cpu_count() or 2) // max(1, jobs))
    log(f"mutate run: {len(manifest['mutants'])} mutants, {jobs} at a time, {threads} OpenMP "
        f"threads each, budget {a.budget} s; GPU: {gpu_name()}")
    out = {"schema": SCHEMA, "context": {"git_sha": manifest.get("git_sha", "?"), "gpu": gpu_name(),
                                         "jobs": jobs, "omp_threads": threads,
                                         "suite": [c["name"] for c in suite["commands"]],
                                         "budget_s": a.budget}}

    def write():
        out["seconds"] = round(time.time() - t_start, 1)
        with open(os.path.join(results_dir, "mutation.json"), "w") as f:
            json.dump(out, f, indent=1)

    # ---- the control first
    slot0 = os.path.join(d, "slots", "0")
    try:
        control_so = lib_of(None)
    except RuntimeError as e:
        out["control"] = {"pass": False, "why": f"linking libmc_kernels.so failed: {e}"}
        out["mutants"], out["summary"] = [], {"total": len(manifest["mutants"]), "killed": 0,
                                              "survived": 0, "not_run": len(manifest["mutants"]),
                                              "kill_rate": None}
        write()
        log(f"mutate run: {out['control']['why']}")
        return 1
    make_slot(stage, slot0, control_so)
    ok, res = run_suite(slot0, suite, logs, "control", threads * jobs if a.control_all_threads else threads,
                        {}, deadline)
    skipped = sum(r["skipped"] for r in res)
    passed = sum(r["passed"] for r in res)
    # every command must run tests of its own: a filter that matches nothing passes
    # vacuously and would let every mutant it was meant to catch survive it
    empty = [r["name"] for r in res if r["passed"] == 0 and not r["failed_tests"]]
    out["control"] = {"pass": ok and skipped == 0 and passed > 0 and not empty, "commands": res,
                      "seconds": round(sum(r["seconds"] for r in res), 1), "skipped": skipped}
    log(f"mutate run: control {'PASS' if out['control']['pass'] else 'FAIL'} in "
        f"{out['control']['seconds']} s ({passed} tests, {skipped} skipped): " +
        ", ".join(f"{r['name']} {r['seconds']} s" for r in res))
    if not out["control"]["pass"]:
        out["control"]["why"] = (verdict_of(res) if not ok else
                                 f"{skipped} test(s) skipped (no usable GPU?)" if skipped else
                                 f"command(s) {', '.join(empty)} ran no test (a gtest filter that "
                                 "matches nothing?)" if empty else "no tests ran")
        out["mutants"] = []
        out["summary"] = {"total": len(manifest["mutants"]), "killed": 0, "survived": 0,
                          "not_run": len(manifest["mutants"]), "kill_rate": None}
        write()
        shutil.rmtree(os.path.join(d, "slots"), ignore_errors=True)
        log(f"mutate run: the control must pass: {out['control']['why']}; no mutant was run")
        return 1
    # per-command limits: generous multiples of the control's own times
    timeouts = {r["name"]: max(30.0, 4 * r["seconds"] + 10) for r in res}
    ctrl_total = out["control"]["seconds"]

    # ---- the mutants, `jobs` at a time, each in its own slot
    free = queue.Queue()
    for i in range(jobs):
        slot = os.path.join(d, "slots", str(i))
        if i:
            make_slot(stage, slot, control_so)
        free.put(slot)
    entries = []
    lock = threading.Lock()

    def one(m):
        e = {k: m.get(k, "") for k in ("id", "family", "kind", "what", "expect", "equivalent")}
        if "device_code_identical" in m:
            e["device_code_identical"] = m["device_code_identical"]
        if time.time() + min(ctrl_total, 20) > deadline:
            e.update(status="not_run", why="time budget")
            return e
        try:
            lib = lib_of(m["id"])
        except RuntimeError as err:
            e.update(status="error", why=f"link failed: {str(err)[:300]}")
            return e
        slot = free.get()
        try:
            install(slot, lib)
            ok, res = run_suite(slot, suite, logs, m["id"], threads, timeouts, deadline)
        finally:
            free.put(slot)
            os.remove(lib)
        e["seconds"] = round(sum(r["seconds"] for r in res), 1)
        e["commands"] = [{k: r[k] for k in ("name", "rc", "seconds", "timed_out")} for r in res]
        if ok:
            e["status"] = "survived"
        elif res[-1]["timed_out"] and time.time() >= deadline - 1:
            e["status"], e["why"] = "not_run", "time budget (cut short)"
        else:
            e["status"], e["killed_by"] = "killed", verdict_of(res)
            e["failed_tests"] = res[-1]["failed_tests"]
        with lock:
            log(f"  {m['id']:40s} {e['status']:9s} {e['seconds']:6.1f} s  {e.get('killed_by', '')}")
        return e

    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        entries = list(ex.map(one, manifest["mutants"]))
    out["mutants"] = entries
    killed = sum(e["status"] == "killed" for e in entries)
    survived = sum(e["status"] == "survived" for e in entries)
    not_run = sum(e["status"] in ("not_run", "error") for e in entries)
    # equivalent: a survivor the patch list explains as unobservable (# equivalent:
    # line, or device code proven identical); the others are the suite's gaps
    equivalent = sum(e["status"] == "survived" and bool(e["equivalent"]) for e in entries)
    judged = killed + survived - equivalent
    out["summary"] = {"total": len(entries), "killed": killed, "survived": survived, "not_run": not_run,
                      "kill_rate": round(killed / (killed + survived), 4) if killed + survived else None,
                      "equivalent_survivors": equivalent,
                      "kill_rate_non_equivalent": round(killed / judged, 4) if judged else None}
    write()
    for sub in ("slots", "objs", "libs"):
        shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
    log(f"mutate run: {killed} killed, {survived} survived, {not_run} not run; kill rate "
        f"{out['summary']['kill_rate']} -> {os.path.join(results_dir, 'mutation.json')}")
    for e in entries:
        if e["status"] == "survived":
            log(f"  SURVIVOR {e['id']}: {e['what']}" + (f" [equivalent: {e['equivalent']}]" if e["equivalent"] else ""))
    return 0


def listed_tests(exe, args):
    """The tests a gtest command line selects (its last --gtest_filter, as gtest reads it)."""
    filters = [x.split("=", 1)[1] for x in args if x.startswith("--gtest_filter=")]
    return selected_tests(exe, filters[-1] if filters else None, timeout=60)


def cmd_check(a):
    """Every command of the suite must select at least one test of its binary: a
    filter that matches nothing passes vacuously (the `steps` filter once named
    StepParity.* while the typed suite's tests are StepParity/<n>.*, and the step
    kernels' mutants then met no step test on the GPU). And every mutant's patch must
    apply to the sources as they are: six had gone stale under later kernel changes
    (found 2026-12-05), which `build` reports only on the way to a GPU."""
    build = os.path.realpath(a.build)
    with open(a.suite) as f:
        suite = json.load(f)
    bad = 0
    import tempfile
    for m in load_mutants():
        with tempfile.TemporaryDirectory() as w:
            _, _, r = patched_sources(m, w)
        if r.returncode != 0:
            log(f"mutate check: {m['patch']} does not apply: {(r.stdout + r.stderr).strip()[:200]}")
            bad += 1
    log(f"mutate check: all {len(load_mutants())} patches apply" if not bad else
        f"mutate check: {bad} patch(es) do not apply")
    for c in suite["commands"]:
        exe = os.path.join(build, c["exe"])
        if not os.path.exists(exe):
            log(f"mutate check: {c['name']}: {exe} is not built")
            bad += 1
            continue
        n = len(listed_tests(exe, c.get("args", [])))
        log(f"mutate check: {c['name']}: {n} test(s) selected")
        if n == 0:
            log(f"mutate check: {c['name']}: its filter selects no test of {c['exe']}")
            bad += 1
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(description="mutation runner: build mutant kernel libraries here, "
                                "run the fast GPU suite on each there (scripts/mutate.sh)")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the control and every mutant libmc_kernels.so, stage them")
    b.add_argument("--build", default=os.path.join(ROOT, "build"), help="configured CUDA build, Unix Makefiles generator (default build)")
    b.add_argument("--out", default=os.path.join(ROOT, "build-mutants"), help="staging folder (default build-mutants)")
    b.add_argument("--jobs", type=int, default=2, help="parallel compiles (default 2)")
    b.add_argument("--only", help="comma-separated mutant ids (default all)")
    r = sub.add_parser("run", help="run the fast GPU suite on the control, then on every mutant")
    r.add_argument("dir", nargs="?", default=os.path.join(ROOT, "build-mutants"), help="what build staged")
    r.add_argument("--out", help="results folder (default <dir>/results)")
    r.add_argument("--jobs", type=int, default=8, help="mutants at a time on the one GPU (default 8)")
    r.add_argument("--only", help="comma-separated mutant ids (default all; the control always runs)")
    r.add_argument("--budget", type=float, default=170, help="seconds for the whole run (default 170)")
    r.add_argument("--control-all-threads", action="store_true",
                   help="run the control with all the OpenMP threads (default: a job's share)")
    lk = sub.add_parser("link", help="link the unmutated libmc_kernels.so from the staged objects "
                        "(to complete a build staged without its kernel library)")
    lk.add_argument("dir", nargs="?", default=os.path.join(ROOT, "build-mutants"), help="what build staged")
    lk.add_argument("--out", required=True, help="where to write libmc_kernels.so")
    ck = sub.add_parser("check", help="every suite command selects at least one test (no GPU needed)")
    ck.add_argument("--build", default=os.path.join(ROOT, "build"), help="a build with the GPU test binaries")
    ck.add_argument("--suite", default=os.path.join(ROOT, "validation", "mutants", "suite.json"))
    e = sub.add_parser("emulate", help="CPU-side prediction for the scan mutants (the emulated "
                       "dump and scan parity suite with each patch); no GPU")
    e.add_argument("--build", default=os.path.join(ROOT, "build"), help="configured CUDA build, Unix Makefiles generator")
    e.add_argument("--jobs", type=int, default=2, help="parallel compiles (default 2)")
    e.add_argument("--only", help="comma-separated mutant ids (default: every scan mutant)")
    # The whole case list: ~50 s a mutant on 2 cores since the emulation's fibers switch
    # without a system call (validation/emulation/fiber_switch.cpp). The d_state 16 subset
    # that was the default before let ckpt-bwd-segment-drops-dA-carry through: its code runs
    # only above d_state 16.
    e.add_argument("--filter", default="Cases/*",
                   help="gtest filter of the emulated parity run when the dump is unchanged")
    a = p.parse_args(argv)
    return {"build": cmd_build, "run": cmd_run, "link": cmd_link, "check": cmd_check,
            "emulate": cmd_emulate}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
