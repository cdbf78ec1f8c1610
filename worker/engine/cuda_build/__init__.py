"""Fast builds of load_inline CUDA candidates: kernels through nvcc without torch, host code against a
precompiled torch header, linked into the extension torch itself would have built.

Modules: toolchain (where nvcc and the compilers are), split (clang's parse decides what is device
code), pch (the precompiled header, trusted), fast (compile, join, link), ninja_state (ninja's
records), source_map (errors point at the candidate's lines), sandboxed (entry point in the build
sandbox), pool (how many builds at once), torch_support (compiling against a CPU torch).
Inside the sandbox this package is imported on its own, so it depends on the standard library,
torch and clang only.
"""
