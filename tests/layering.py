#!/usr/bin/env python3
"""The include order of src/ (#29 item 2): a folder includes only itself and the folders
before it in LAYERS (later layers may use earlier ones, never the reverse), as
../shared/DESIGN.md draws the layout (obs/, the logging and metrics primitives, sits right
above util/; serialize/, the file formats: torch.save's pickle, safetensors, above obs/; kernels/, ddptrain's own ATen ops and their CUDA kernels, above serialize/;
optim/, the fused optimizers and clipping that ddp/'s ZeRO and train/ both
build, above dist/).
KNOWN lists includes against the order that are tolerated for now, each with what is to
replace it (empty since the thirteenth session: keep it so): an include against the order that
is not listed fails, and so does a listed one that is gone.

Run: python3 tests/layering.py SOURCE_DIR (ctest: Build.IncludesFollowTheLayers).
"""
import pathlib
import re
import sys

LAYERS = ["util", "obs", "serialize", "kernels", "dist", "optim", "ddp", "data", "models", "checkpoint", "train", "config", "launch"]

# (including folder, included header): what replaces it.
KNOWN = {}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([A-Za-z0-9_.]+)"', re.M)


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".") / "src"
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = {}
    for path in sorted(src.glob("*/*")):
        layer = path.parent.name
        if layer not in rank or path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
            continue
        for m in INCLUDE.finditer(path.read_text()):
            target = m.group(1)
            if target in rank and rank[target] > rank[layer]:
                found.setdefault((layer, f"{m.group(1)}/{m.group(2)}"), []).append(str(path.relative_to(src.parent)))
    unknown_layers = sorted({p.parent.name for p in src.glob("*/*") if p.parent.name not in rank})
    failures = []
    if unknown_layers:
        failures.append(f"folders of src/ not in LAYERS: {unknown_layers}; place them in the order")
    for (layer, header), files in sorted(found.items()):
        if (layer, header) not in KNOWN:
            failures.append(f"{', '.join(files)}: {layer}/ includes {header}, a later layer "
                            f"({' < '.join(LAYERS)}); move what it needs down, or take it through an interface")
    for (layer, header), fix in sorted(KNOWN.items()):
        if (layer, header) not in found:
            failures.append(f"KNOWN lists {layer}/ -> {header} ({fix}), which no file includes any more: "
                            "remove it from tests/layering.py")
    for f in failures:
        print("layering:", f)
    print(f"layering: {len(found)} includes against the order, all known ({len(KNOWN)} listed)" if not failures
          else f"layering: {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
