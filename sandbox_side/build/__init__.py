"""Fast builds of load_inline CUDA candidates: kernels through nvcc without torch, host code against a
precompiled torch header, linked into the extension torch itself would have built.

Modules: toolchain (where nvcc and the compilers are), split (clang's parse decides what is device
code), pch (the precompiled header, built by trusted code), fast (compile, join, link), ninja_state
(ninja's records), source_map (errors point at the candidate's lines), sandboxed (entry point in the
build sandbox), ext_tree (the built folder as a message), torch_support (compiling against a CPU torch).
The build sandbox mounts sandbox_side/ at its own path (clang checks a precompiled header's files are where
they were); it depends on the standard library, torch and clang only. How many builds run at once is the
supervisor's (worker/engine/build/pool.py).
"""
