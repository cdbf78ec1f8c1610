"""Per-candidate Triton caches: one folder per candidate source, filled once from what a runner of that
source sends back as its reply's payload, and never a path for one candidate to reach another's."""

from __future__ import annotations

import os

from sandbox_side.runtime import file_tree
from sandbox_side.runtime.messages import Payload, TritonCacheDone
from sandbox_side.runtime.sealed_payload import SealedBuffer
from worker.engine.build import triton_cache


def _reply(folder) -> TritonCacheDone:
    """What a runner answers to `triton_cache` (sandbox_side/runtime/runner.py op_triton_cache)."""
    files, data = file_tree.pack(folder)
    return TritonCacheDone(files=files, payload=Payload(len(data), None, SealedBuffer.from_bytes(data)))


def _compiled(tmp_path, name: str, content: bytes):
    cache = tmp_path / name / triton_cache.CACHE_DIR_NAME
    (cache / "abc").mkdir(parents=True)
    (cache / "abc" / "kernel.cubin").write_bytes(content)
    return cache


def test_a_candidates_kernels_come_back_to_its_own_folder_once(tmp_path):
    root = tmp_path / "triton"
    mine = triton_cache.folder_for(root, "candidate A")
    other = triton_cache.folder_for(root, "candidate B")
    assert mine != other and triton_cache.folder_for(root, "candidate A") == mine, "keyed by the source"
    assert triton_cache.wanted(mine)

    assert triton_cache.publish(root, mine, _reply(_compiled(tmp_path, "runner1", b"\x7fELF kernels")))
    assert (mine / triton_cache.CACHE_DIR_NAME / "abc" / "kernel.cubin").read_bytes() == b"\x7fELF kernels"
    assert not (other / triton_cache.CACHE_DIR_NAME).exists()
    assert not triton_cache.wanted(mine)
    # Readable by every sandbox uid (a 0700 folder failed every later runner with "Permission denied").
    for path in [mine / triton_cache.CACHE_DIR_NAME, *(mine / triton_cache.CACHE_DIR_NAME).rglob("*")]:
        assert path.stat().st_mode & 0o005 == (0o005 if path.is_dir() else 0o004), path

    # A second runner of the same source started from it: its answer changes nothing.
    assert not triton_cache.publish(root, mine, _reply(_compiled(tmp_path, "runner2", b"rewritten")))
    assert (mine / triton_cache.CACHE_DIR_NAME / "abc" / "kernel.cubin").read_bytes() == b"\x7fELF kernels"


def test_links_paths_out_of_the_folder_and_other_roots_are_never_written(tmp_path):
    root = tmp_path / "triton"
    mine = triton_cache.folder_for(root, "candidate A")
    produced = tmp_path / "runner" / triton_cache.CACHE_DIR_NAME
    produced.mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    os.symlink(secret, produced / "leak.txt")
    os.symlink(tmp_path, produced / "leak-dir")
    (produced / "real.bin").write_bytes(b"ok")
    assert triton_cache.publish(root, mine, _reply(produced))  # the runner's packer leaves links out
    assert sorted(p.name for p in (mine / triton_cache.CACHE_DIR_NAME).iterdir()) == ["real.bin"]

    # A forged manifest that climbs out of the folder is refused whole.
    forged = TritonCacheDone(files=[{"path": "../../escaped.bin", "size": 2, "mtime_ns": 0}],
                             payload=Payload(2, None, SealedBuffer.from_bytes(b"no")))
    other = triton_cache.folder_for(root, "candidate B")
    assert not triton_cache.publish(root, other, forged)
    assert not (other / triton_cache.CACHE_DIR_NAME).exists() and not (root / "escaped.bin").exists()

    # A folder that is not a candidate's under the Triton root (a CUDA build's) is never written to.
    build_dir = tmp_path / "build-cache" / "key"
    build_dir.mkdir(parents=True)
    assert not triton_cache.publish(root, build_dir, _reply(produced))
    assert not (build_dir / triton_cache.CACHE_DIR_NAME).exists()


def test_the_runners_packer_refuses_more_than_the_bound(tmp_path):
    produced = _compiled(tmp_path, "runner", b"x" * 100)
    try:
        file_tree.pack(produced, max_bytes=50)
    except file_tree.TooLarge:
        return
    raise AssertionError("a cache over the bound was packed")
