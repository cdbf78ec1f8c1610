"""Per-candidate Triton caches: one folder per candidate source, copied into that candidate's runners only,
published back once, and never a path for one candidate to reach another's."""

from __future__ import annotations

import os

from worker.engine import build, triton_cache


def _runner_slot(tmp_path, name: str):
    slot = tmp_path / "slots" / name
    (slot / "ext").mkdir(parents=True)
    return slot


def test_a_candidates_kernels_come_back_to_its_own_folder_and_only_there(tmp_path):
    root = tmp_path / "triton"
    mine = triton_cache.folder_for(root, "candidate A")
    other = triton_cache.folder_for(root, "candidate B")
    assert mine != other and triton_cache.folder_for(root, "candidate A") == mine, "keyed by the source"

    slot = _runner_slot(tmp_path, "r1")
    build.private_copy(mine, slot / "ext")  # what the device stage does before the candidate loads
    produced = slot / "ext" / triton_cache.CACHE_DIR_NAME / "abc"
    produced.mkdir(parents=True)
    (produced / "kernel.cubin").write_bytes(b"\x7fELF kernels")
    assert triton_cache.publish_from_slot(root, slot)
    assert (mine / triton_cache.CACHE_DIR_NAME / "abc" / "kernel.cubin").read_bytes() == b"\x7fELF kernels"
    assert not (other / triton_cache.CACHE_DIR_NAME).exists()

    # The next runner of the same source starts from it; a second publication changes nothing.
    again = _runner_slot(tmp_path, "r2")
    build.private_copy(mine, again / "ext")
    assert (again / "ext" / triton_cache.CACHE_DIR_NAME / "abc" / "kernel.cubin").exists()
    (again / "ext" / triton_cache.CACHE_DIR_NAME / "abc" / "kernel.cubin").write_bytes(b"rewritten")
    assert not triton_cache.publish_from_slot(root, again)
    assert (mine / triton_cache.CACHE_DIR_NAME / "abc" / "kernel.cubin").read_bytes() == b"\x7fELF kernels"


def test_links_and_folders_outside_the_cache_root_are_never_published(tmp_path):
    root = tmp_path / "triton"
    mine = triton_cache.folder_for(root, "candidate A")
    slot = _runner_slot(tmp_path, "r1")
    build.private_copy(mine, slot / "ext")
    produced = slot / "ext" / triton_cache.CACHE_DIR_NAME
    produced.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    os.symlink(secret, produced / "leak.txt")
    os.symlink(tmp_path, produced / "leak-dir")
    (produced / "real.bin").write_bytes(b"ok")
    assert triton_cache.publish_from_slot(root, slot)
    published = mine / triton_cache.CACHE_DIR_NAME
    assert sorted(p.name for p in published.iterdir()) == ["real.bin"]

    # A CUDA build folder (not under the Triton root) is never written back to.
    build_dir = tmp_path / "build-cache" / "key"
    build_dir.mkdir(parents=True)
    cuda_slot = _runner_slot(tmp_path, "r2")
    build.private_copy(build_dir, cuda_slot / "ext")
    (cuda_slot / "ext" / triton_cache.CACHE_DIR_NAME).mkdir()
    assert not triton_cache.publish_from_slot(root, cuda_slot)
    assert not (build_dir / triton_cache.CACHE_DIR_NAME).exists()
