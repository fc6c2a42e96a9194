"""One commit point for both views of a store: dppca_dask's metadata and AnnData's arrays.

A store's root ``zarr.json`` holds, beside the ``dppca_dask`` metadata, zarr's consolidated metadata: the shape and
attributes of every array and group of the store. zarr (``zarr.open``, ``zarr.open_group``) and AnnData
(``anndata.read_zarr``, which opens the store with ``zarr.open``) read a consolidated store's nodes from there, so one
replacement of that one file (atomic on a local file system: zarr writes a temporary file and renames it; one PUT in
object storage) changes both views at once.

An append writes its rows into chunks beyond the arrays' committed shapes through handles whose grown shape lives in
memory only (:meth:`Changes.grow`): every node's metadata, its own ``zarr.json`` as the consolidated copy, keeps the
old shape, and a reader sees the old store. :meth:`Changes.commit` then replaces the root document, with every new
shape and attribute and the new ``dppca_dask`` metadata in it: the commit. Last, each changed node's own
``zarr.json`` is brought up to date (:func:`sync_nodes`) for readers that open an array on its own; a process killed
before that leaves them behind the consolidated copy, and the next append brings them up to date first.

Stores written before this layout have no consolidated metadata: the first append cuts back what an interrupted
append of an earlier release left and consolidates the store (a metadata write that changes nothing a reader sees)
before writing rows. A store's nodes changed with zarr directly (an array added or resized) must be consolidated
again (``zarr.consolidate_metadata``), as for any consolidated zarr store.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.group import ConsolidatedMetadata
from zarr.core.sync import sync

__all__ = ["Changes", "consolidate", "direct_grow", "is_consolidated", "sync_nodes"]

log = logging.getLogger(__name__)


def is_consolidated(group: zarr.Group) -> bool:
    """Whether ``group`` (a store's root) carries consolidated metadata."""
    return group.metadata.consolidated_metadata is not None


def consolidate(group: zarr.Group) -> zarr.Group:
    """Write the consolidated metadata of ``group``'s nodes as they are into its ``zarr.json``; returns it reopened."""
    with warnings.catch_warnings():  # "not part of the zarr format 3 specification": zarr and AnnData read it
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(group.store_path.store, path=group.store_path.path or None)
    return zarr.open_group(group.store_path.store, path=group.store_path.path, mode="r+")


def direct_grow(array: zarr.Array, shape: tuple[int, ...]) -> zarr.Array:
    """Resize ``array`` at once (a store being written, that no reader sees yet)."""
    array.resize(shape)
    return array


def _relative(group: zarr.Group, node: zarr.Array | zarr.Group) -> str:
    prefix = group.path.strip("/")
    path = node.path.strip("/")
    return path[len(prefix):].lstrip("/") if prefix else path


def _replace_node(cm: ConsolidatedMetadata, path: str, change: Callable[[Any], Any]) -> ConsolidatedMetadata:
    head, _, rest = path.partition("/")
    node: Any
    if rest:
        node = cm.metadata[head]  # a group
        node = dataclasses.replace(node, consolidated_metadata=_replace_node(node.consolidated_metadata, rest, change))
    else:
        node = change(cm.metadata.get(head))
    return dataclasses.replace(cm, metadata={**cm.metadata, head: node})


def _write_node(group: zarr.Group, path: str, metadata: Any) -> None:
    if path and hasattr(metadata, "consolidated_metadata"):  # a child group's own zarr.json lists no children
        metadata = dataclasses.replace(metadata, consolidated_metadata=None)
    prefix = group.store_path.path.strip("/")
    key = "/".join(p for p in (prefix, path, "zarr.json") if p)
    buffer = metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"]
    sync(group.store_path.store.set(key, buffer))


class Changes:
    """Writes to a consolidated store whose metadata waits for one commit (see the module's docstring).

    ``group`` is the store's root opened for writing (with its consolidated metadata)."""

    def __init__(self, group: zarr.Group) -> None:
        if not is_consolidated(group):
            raise ValueError("Changes needs a consolidated store; consolidate() it first")
        self.group = group
        self._cm: ConsolidatedMetadata = group.metadata.consolidated_metadata  # type: ignore[assignment]
        self.changed: list[str] = []

    def _note(self, path: str, change: Callable[[Any], Any]) -> None:
        self._cm = _replace_node(self._cm, path, change)
        if path not in self.changed:
            self.changed.append(path)

    def grow(self, array: zarr.Array, shape: tuple[int, ...]) -> zarr.Array:
        """A handle of ``array`` with ``shape`` (larger or smaller) in memory only: what is written through it lands
        in chunk files, and its stored metadata is unchanged until :meth:`commit`."""
        metadata = array.metadata.update_shape(tuple(int(s) for s in shape))
        self._note(_relative(self.group, array), lambda _old: metadata)
        return zarr.Array(dataclasses.replace(array.async_array, metadata=metadata))

    def create(self, parent: zarr.Group, name: str, **kwargs: Any) -> zarr.Array:
        """A new array (its own ``zarr.json`` written now, an earlier interrupted append's replaced), listed in the
        consolidated metadata only at :meth:`commit`."""
        array = parent.create_array(name, overwrite=True, **kwargs)
        self._note(_relative(self.group, array), lambda _old: array.metadata)
        return array

    def set_attributes(self, node: zarr.Array | zarr.Group, attributes: Mapping[str, Any]) -> None:
        """Set ``attributes`` (merged into the node's) at :meth:`commit`."""
        path = _relative(self.group, node)
        merged = {**node.attrs.asdict(), **attributes}
        self._note(path, lambda old: dataclasses.replace(old, attributes=merged))

    def node_metadata(self, path: str) -> Any:
        """The metadata ``path`` will have after the commit (None: no such node)."""
        return self._cm.flattened_metadata.get(path)

    def commit(self, root_attributes: Mapping[str, Any]) -> None:
        """Replace the root ``zarr.json``: every change and ``root_attributes`` in one write (the commit point);
        then bring the changed nodes' own ``zarr.json`` up to date."""
        root = dataclasses.replace(self.group.metadata, attributes={**self.group.metadata.attributes,
                                                                     **root_attributes},
                                   consolidated_metadata=self._cm)
        _write_node(self.group, "", root)
        try:
            flat = self._cm.flattened_metadata
            for path in self.changed:
                _write_node(self.group, path, flat[path])
        except Exception as exc:  # committed: the next append brings them up to date
            log.warning("store %s: committed; the nodes' own metadata files were not all updated (%s): the next "
                        "append updates them", self.group.store_path, type(exc).__name__)


def sync_nodes(group: zarr.Group) -> int:
    """Bring every node's own ``zarr.json`` up to its consolidated copy (after a process killed between an append's
    commit and its last writes); returns how many were rewritten."""
    cm = group.metadata.consolidated_metadata
    if cm is None:
        return 0
    own = zarr.open_group(group.store_path.store, path=group.store_path.path, mode="r", use_consolidated=False)
    written = 0
    metadata: Any
    stored: Any
    for path, metadata in cm.flattened_metadata.items():
        try:
            stored = own[path].metadata
        except KeyError:
            stored = None
        wanted = metadata
        if hasattr(metadata, "consolidated_metadata"):
            wanted = dataclasses.replace(metadata, consolidated_metadata=None)
            stored = None if stored is None else dataclasses.replace(stored, consolidated_metadata=None)
        if stored != wanted:
            _write_node(group, path, metadata)
            written += 1
    return written
