"""System files on disk: a topology file (TOML, the format of :mod:`perfmodel.topology.io`) or
the JSON ``topo show --json`` / ``topo import --json`` writes, read into a
:class:`~perfmodel.topology.io.ServerDescription` (memoised by the file's text); and a
description written as a topology file, checked to read back and build first.

Above :mod:`~perfmodel.topology.io` (the format), :mod:`~perfmodel.topology.importers` (the JSON
export) and :mod:`~perfmodel.topology.cluster` (the check that a written file builds).
"""

from __future__ import annotations

from pathlib import Path

from perfmodel._io import parse_toml, read_text
from perfmodel._memo import BoundedMemo
from perfmodel.hardware.gpus import get_gpu
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.io import ServerDescription, format_system_file, parse_server
from perfmodel.topology.schema import NodeKind

_READ_CACHE: BoundedMemo[tuple[str, str, str | None], ServerDescription] = BoundedMemo(64)


def read_server_file(path: str | Path, *, gpu_override: str | None = None) -> ServerDescription:
    """Read and validate one topology file.

    The file is read every time; text read before from the same path is answered from memory
    without parsing and validating it again (a prediction loads its system for the cluster, the
    speedup baseline and the micro-batch search: three parses of the same file, issue 14 cold
    start). Keyed by the text itself, so an edited file is parsed again whatever its timestamps
    say; the description is immutable, so sharing it is safe.
    """
    p = Path(path)
    text = read_text(p)
    if p.suffix.lower() == ".json":
        return _READ_CACHE.get(
            (str(p), text, gpu_override), lambda: _server_from_json(text, p, gpu_override)
        )
    return _READ_CACHE.get(
        (str(p), text, gpu_override),
        lambda: parse_server(parse_toml(text, p), source=str(p), gpu_override=gpu_override),
    )


def _server_from_json(text: str, path: Path, gpu_override: str | None) -> ServerDescription:
    """Server 0 of the JSON ``topo show --json`` / ``topo import --json`` writes
    (:func:`perfmodel.topology.export.from_dict`,
    :func:`~perfmodel.topology.export.server_description`), with ``gpu_override`` as the
    model of every GPU when given."""
    import dataclasses

    from perfmodel.topology.export import from_json_text, server_description

    desc = server_description(from_json_text(text, str(path)), source=str(path))
    if gpu_override is None:
        return desc
    model = get_gpu(gpu_override, where="--gpu").name
    nodes = tuple(
        dataclasses.replace(n, model=model) if n.kind is NodeKind.GPU else n for n in desc.nodes
    )
    return dataclasses.replace(desc, nodes=nodes, gpu=model)


#: First line of a system file ``perfmodel topo import -o`` writes: the mark that lets a later
#: import replace the file without ``--force`` (a file without it is the user's own).
WRITTEN_MARK = "# perfmodel topo import:"


def write_system_file(
    desc: ServerDescription, path: str | Path, *, header: str = "", force: bool = False
) -> Path:
    """Write ``desc`` as a topology file at ``path``, atomically, after checking that the text
    reads back (:func:`parse_server`) and builds; nothing is written on any error.

    An existing file is replaced only if its first line is :data:`WRITTEN_MARK` (a file this
    function wrote) or ``force``; the file's ``[system] name`` is ``path``'s stem.

    Raises
    ------
    FileAccessError
        ``path`` exists and was not written by perfmodel (without ``force``), or cannot be
        written.
    TopologyError
        The description does not make a valid system file.
    """
    import dataclasses

    from perfmodel._io import atomic_write, check_output_path, os_error_message
    from perfmodel.errors import FileAccessError

    p = check_output_path(path, where="-o", suffixes=(".toml",))
    if p.exists() and not force:
        try:
            first = p.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        except OSError as exc:
            raise FileAccessError(
                f"-o {p}: {os_error_message(exc)}", value=str(p), where="-o"
            ) from exc
        if not first.startswith(WRITTEN_MARK):
            raise FileAccessError(
                f"-o {p}: the file exists and was not written by perfmodel topo import; "
                "give --force to replace it, or another name",
                value=str(p),
                where="-o",
            )
    desc = dataclasses.replace(desc, name=p.stem)
    mark = f"{WRITTEN_MARK} {header}".rstrip() if header else WRITTEN_MARK
    text = format_system_file(desc, header=mark)
    check = parse_server(parse_toml(text, p), source=str(p))  # reads back, or raises
    build_cluster(check, 1, check.fabric)  # builds (connectivity, schema), or raises
    try:
        with atomic_write(p) as fh:
            fh.write(text)
    except OSError as exc:
        raise FileAccessError(f"-o {p}: {os_error_message(exc)}", value=str(p), where="-o") from exc
    return p
