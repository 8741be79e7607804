"""Tar and WebDataset files for the webdataset tests (#30 item 3), written by Python's tarfile.

usage:
  wds.py from_folder ROOT OUT PER_SHARD
                       the ImageFolder ROOT's images in torchvision's order (sorted class folders,
                       sorted files) as WebDataset shards OUT-000000.tar, OUT-000001.tar, ...
                       (PER_SHARD samples each, tarfile's default pax format): members
                       <class>/<stem>.<ext> (the image's bytes as they are) and <class>/<stem>.cls
                       (the class index as text)
  wds.py formats DIR   archives in each of tarfile's formats (ustar, gnu, pax) holding long and
                       non-ASCII names, a folder, a symlink, a hard link and an empty file, and two
                       sparse archives of one 9 GiB member (GNU's base-256 size, pax's size
                       record); for each DIR/<name>.tar, DIR/<name>.members lists the regular
                       files as tarfile reads them back: "offset_data size name" lines
  wds.py split NAMES OUT
                       webdataset's base_plus_ext (its regex) on each line of NAMES: OUT gets
                       "key<TAB>extension" or "-" per line
"""
import io
import os
import re
import sys
import tarfile

BASE_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset.tariterators.base_plus_ext


def from_folder(root, out, per_shard):
    items = []
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    for label, c in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    items.append((os.path.join(folder, f), label))
    for s in range(0, len(items), per_shard):
        with tarfile.open(f"{out}-{s // per_shard:06d}.tar", "w") as tar:
            for path, label in items[s:s + per_shard]:
                rel = os.path.relpath(path, root)
                stem, ext = os.path.splitext(rel)
                tar.add(path, arcname=stem + ext.lower())
                add_bytes(tar, stem + ".cls", str(label).encode())


def add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    tar.addfile(info, io.BytesIO(data))


def formats(d):
    os.makedirs(d, exist_ok=True)
    long_name = "deep/" * 30 + "sample.with.dots.jpg"  # 170 characters
    for fmt_name, fmt in [("ustar", tarfile.USTAR_FORMAT), ("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT)]:
        path = f"{d}/{fmt_name}.tar"
        with tarfile.open(path, "w", format=fmt) as tar:
            add_bytes(tar, "0001.jpg", b"x" * 700)
            add_bytes(tar, "0001.cls", b"3\n")
            folder = tarfile.TarInfo("a_folder")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
            link = tarfile.TarInfo("0002.lnk")
            link.type = tarfile.SYMTYPE
            link.linkname = "0001.jpg"
            tar.addfile(link)
            hard = tarfile.TarInfo("0002.hard")
            hard.type = tarfile.LNKTYPE
            hard.linkname = "0001.jpg"
            tar.addfile(hard)
            add_bytes(tar, "empty.txt", b"")
            add_bytes(tar, "prefix_" + "p" * 120 + "/name.png", b"y" * 513)  # ustar: prefix field
            if fmt != tarfile.USTAR_FORMAT:
                add_bytes(tar, long_name, b"z" * 1024)
                add_bytes(tar, "n\u00e4me/\u00fc.cls", b"1")
        members(path)
    for fmt_name, fmt in [("big_gnu", tarfile.GNU_FORMAT), ("big_pax", tarfile.PAX_FORMAT)]:
        path = f"{d}/{fmt_name}.tar"
        info = tarfile.TarInfo("huge.bin")
        info.size = 9 << 30
        with open(path, "wb") as f:
            f.write(info.tobuf(fmt, "utf-8", "surrogateescape"))
            f.truncate(f.tell() + info.size + 1024)  # sparse: the data and the end blocks are holes
        members(path)


def members(path):
    with tarfile.open(path) as tar, open(path[:-4] + ".members", "w", encoding="utf-8",
                                          errors="surrogateescape") as out:
        for m in tar.getmembers():
            if m.isreg():
                out.write(f"{m.offset_data} {m.size} {m.name}\n")


def split(names, out):
    with open(names, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as o:
        for line in f.read().split("\n")[:-1]:
            m = BASE_RE.match(line)
            o.write(f"{m.group(1)}\t{m.group(2)}\n" if m else "-\n")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "from_folder":
        from_folder(args[0], args[1], int(args[2]))
    elif cmd == "formats":
        formats(args[0])
    elif cmd == "split":
        split(args[0], args[1])
    else:
        sys.exit(f"wds.py: unknown command {cmd!r}; see the docstring")


if __name__ == "__main__":
    main()
