#!/usr/bin/env python3
"""`make install`'s static link: a program with the Swift runtime linked in, from the objects
`swift build -c CONFIG` has already compiled.

Usage: link-static.py CONFIG OUTDIR PRODUCT...   (run from the package folder, after
`swift build -c CONFIG --product PRODUCT`; writes OUTDIR/PRODUCT)

Why not `swift build --static-swift-stdlib`: SwiftPM passes `-static-stdlib` to every compile
command as well, so llbuild recompiles the whole package (6.5 minutes for a release build on 2
cores) and the next ordinary build recompiles it all again. Only the link differs, so this
reruns SwiftPM's own link command for PRODUCT, read from its llbuild manifest
(.build/CONFIG.yaml, the command `C.PRODUCT-TRIPLE-CONFIG.exe`), with these changes:
  - `-static-stdlib`: the Swift runtime, Foundation and libdispatch from the toolchain's
    static archives;
  - `-Xlinker --no-export-dynamic`: the toolchain's static-stdlib-args.lnk asks for
    `-export-dynamic`, which would put ~13,000 symbols of the program's own modules in its
    dynamic symbol table, where a plugin's default-visibility symbols of the same name would
    bind to them (the runtime's own are kept local by `--exclude-libs ALL`);
  - no `-rpath=$ORIGIN`: the program loads no library of the package;
  - the output goes to OUTDIR/PRODUCT (beside SwiftPM's dynamically linked one, which tests
    and `swift run` keep using);
  - the toolchain's lld instead of gold, when it has one, for two things gold cannot do:
    `-z pack-relative-relocs` (glibc 2.36's DT_RELR: the 2.1 MB of relative relocations
    the loader read and applied at every start become 17 KB) and
    `--symbol-ordering-file=scripts/static-link.order` (the functions porter and porterd run
    in ordinary use, side by side: the kernel maps code 64 KiB around each page touched,
    and scattered over 20 MB of code those functions made 9.4 MiB of porter's start-up
    resident set; scripts/link-order.py writes the list). Start-up: 26.0 -> ~21 MiB.
A link is skipped when its output is newer than every input and was made by the same command.
"""
import json
import os
import subprocess
import sys


def fail(message):
    sys.stderr.write(f"link-static: {message}\n")
    sys.exit(1)


def link_command(manifest_lines, product, config):
    """The `inputs` and `args` of the llbuild command that links PRODUCT in CONFIG: the
    `C.PRODUCT-TRIPLE-CONFIG.exe` command whose one output is a file named PRODUCT (a name
    alone is not enough: `C.porter-bench-...` starts like `C.porter-...`)."""
    prefix = f'  "C.{product}-'
    suffix = f'-{config}.exe":'
    commands = []
    current = None
    for line in manifest_lines:
        if line.startswith(prefix) and line.rstrip().endswith(suffix):
            current = {"name": line.strip()}
            commands.append(current)
            continue
        if current is None:
            continue
        if not line.startswith("    "):
            current = None  # the next command
            continue
        key, _, value = line.strip().partition(": ")
        if key in ("inputs", "outputs", "args"):
            try:
                parsed = json.loads(value)
            except ValueError:
                fail(f"cannot read the {key} of {current['name']} in the build manifest")
            if not isinstance(parsed, list) or not all(isinstance(a, str) for a in parsed):
                fail(f"unexpected {key} of {current['name']} in the build manifest")
            current[key] = parsed
    for command in commands:
        outputs = command.get("outputs", [])
        if len(outputs) == 1 and os.path.basename(outputs[0]) == product and "inputs" in command and "args" in command:
            return command["inputs"], command["args"]
    fail(f"no link command for {product} in .build/{config}.yaml (run swift build -c {config} --product {product} first)")


def static_args(args, output, stub):
    out = []
    i = 0
    saw_output = False
    while i < len(args):
        a = args[i]
        if a == "-o" and i + 1 < len(args):
            out += ["-o", output]
            saw_output = True
            i += 2
            continue
        if a == "-Xlinker" and i + 1 < len(args) and args[i + 1].startswith("-rpath="):
            i += 2
            continue
        out.append(a)
        i += 1
    if not saw_output or not out or not out[0].endswith("swiftc"):
        fail("the link command is not a swiftc -o command")
    return out + [stub, "-static-stdlib", "-Xlinker", "--no-export-dynamic"]


def linker_args(swiftc):
    """lld with packed relative relocations and the function order, or nothing (gold) when
    the toolchain has no lld; with the files whose change must relink."""
    if not os.path.exists(os.path.join(os.path.dirname(swiftc), "ld.lld")):
        return [], []
    args = ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs"]
    order = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static-link.order")
    if not os.path.exists(order):
        return args, []
    # A name the program no longer has (code changed since the list was made) is not an error.
    return args + ["-Xlinker", f"--symbol-ordering-file={order}", "-Xlinker", "--no-warn-symbol-ordering"], [order]


def import_stub(swiftc, inputs, args, outdir, product):
    """An object with no code that imports, from the toolchain's static modules, every module
    the product's objects autolink. The objects were compiled against the shared modules,
    whose autolink entries name only the shared libraries (-lFoundation); the static archives
    need their own dependencies as well (-lCoreFoundation, -l_FoundationICU, ...), which the
    static modules' entries name. The driver gathers the entries of every object it links."""
    tools = os.path.dirname(swiftc)
    static = os.path.join(os.path.dirname(tools), "lib", "swift_static", "linux")
    objects = [p for p in inputs if p.endswith(".o")]
    try:
        entries = subprocess.run([os.path.join(tools, "swift-autolink-extract"), *objects, "-o", "-"],
                                 check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"swift-autolink-extract on the objects of {product}: {e}")
    modules = []
    for entry in entries:
        if not entry.startswith("-l"):
            continue
        library = entry[2:]
        for name in (library, library[len("swift"):] if library.startswith("swift") else None):
            if name and name not in ("Swift", "SwiftOnoneSupport", "Core") and name not in modules \
                    and os.path.exists(os.path.join(static, name + ".swiftmodule")):
                modules.append(name)
                break
    source = "".join(f"import {m}\n" for m in sorted(modules))
    stub = os.path.join(outdir, product + ".imports")
    try:
        with open(stub + ".swift", encoding="utf-8") as f:
            if f.read() == source and os.path.exists(stub + ".o"):
                return stub + ".o", source
    except OSError:
        pass
    if os.path.exists(stub + ".o"):
        os.remove(stub + ".o")  # never an object of other imports beside this source
    with open(stub + ".swift", "w", encoding="utf-8") as f:
        f.write(source)
    target = args[args.index("-target") + 1] if "-target" in args[:-1] else None
    command = [swiftc, "-static-stdlib", "-parse-as-library", "-module-name", "PorterStaticImports",
               "-c", stub + ".swift", "-o", stub + ".o"] + (["-target", target] if target else [])
    if subprocess.call(command) != 0:
        fail(f"compiling the imports of {product} ({stub}.swift) failed")
    return stub + ".o", source


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("release", "debug"):
        fail("usage: link-static.py release|debug OUTDIR PRODUCT...")
    config, outdir, products = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        with open(f".build/{config}.yaml", encoding="utf-8") as f:
            manifest = f.read().splitlines()
    except OSError as e:
        fail(f".build/{config}.yaml: {e.strerror} (run swift build -c {config} first)")
    os.makedirs(outdir, exist_ok=True)
    for product in products:
        output = os.path.join(os.path.abspath(outdir), product)
        inputs, args = link_command(manifest, product, config)
        stub, imports = import_stub(args[0], inputs, args, os.path.abspath(outdir), product)
        extra, extra_inputs = linker_args(args[0])
        command = static_args(args, output + ".tmp", stub) + extra
        inputs = inputs + extra_inputs
        recorded = output + ".command"
        signature = json.dumps([command, imports])
        try:
            newest = max(os.stat(p).st_mtime_ns for p in inputs)
        except OSError as e:
            fail(f"an input of {product} is missing ({e.filename}): run swift build -c {config} --product {product}")
        try:
            with open(recorded, encoding="utf-8") as f:
                same = f.read() == signature
            fresh = same and os.stat(output).st_mtime_ns >= newest
        except OSError:
            fresh = False
        if fresh:
            print(f"link-static: {outdir}/{product} is up to date")
            continue
        print(f"link-static: linking {outdir}/{product} with the Swift runtime linked statically", flush=True)
        linked = subprocess.run(command, stderr=subprocess.PIPE, text=True)
        for line in linked.stderr.splitlines():
            # The toolchain's own archive calls mktemp (FoundationEssentials' temporary
            # files); the linker says so on every static link. Not ours to fix; the rest is.
            if not ("libFoundationEssentials.a(" in line and "the use of `mktemp' is dangerous" in line):
                sys.stderr.write(line + "\n")
        if linked.returncode != 0:
            fail(f"linking {product} failed")
        os.replace(output + ".tmp", output)
        with open(recorded, "w", encoding="utf-8") as f:
            f.write(signature)


main()
